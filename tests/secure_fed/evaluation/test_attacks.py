from __future__ import annotations

import numpy as np
import pytest

from secure_fed.errors import AttackSpecInvalid, UnknownAttack
from secure_fed.evaluation.attacks import ATTACK_REGISTRY, Attack, make_attack, parse_attack_spec
from tests.secure_fed.federation.helpers import honest


@pytest.mark.parametrize("kind", sorted(ATTACK_REGISTRY))
def test_every_attack_changes_predictions_within_bound(kind: str) -> None:
    p = honest(0)
    sent = make_attack(kind, seed=1)(p)
    assert sent.shape == p.shape and sent.dtype == np.float32
    assert np.abs(sent).max() <= 8.0
    assert not np.allclose(sent, p)
    # argmax moves away from the honest class for the targeted attacks
    if kind in ("label_flip", "sign_flip"):
        assert (sent.argmax(1) != p.argmax(1)).all()


def test_specific_semantics() -> None:
    p = honest(0)
    np.testing.assert_allclose(make_attack("sign_flip")(p), -p)
    np.testing.assert_allclose(make_attack("label_flip", strength=1)(p), np.roll(p, 1, axis=1))
    const = make_attack("constant", strength=2)(p)
    assert (const.argmax(1) == 2).all() and const.max() == 8.0
    np.testing.assert_allclose(make_attack("scaling", strength=0.5)(p), 0.5 * p, rtol=1e-6)


def test_gaussian_is_reproducible_by_seed() -> None:
    p = honest(0)
    a, b = make_attack("gaussian", seed=3)(p), make_attack("gaussian", seed=3)(p)
    np.testing.assert_array_equal(a, b)


def test_hook_takes_any_function() -> None:
    attack = Attack.hook(lambda p: p[::-1] * 2)
    p = honest(0)
    np.testing.assert_allclose(attack(p), np.clip(p[::-1] * 2, -8, 8))
    with pytest.raises(AttackSpecInvalid, match="changed shape"):
        Attack.hook(lambda p: p[:2])(p)
    with pytest.raises(AttackSpecInvalid, match="NaN"):
        Attack.hook(lambda p: p * np.nan)(p)


def test_parse_spec() -> None:
    spec = parse_attack_spec("sign_flip:2", participants=5)
    assert (spec.kind, spec.count) == ("sign_flip", 2)


@pytest.mark.parametrize(
    ("text", "error", "fragment"),
    [
        ("sign_flip", AttackSpecInvalid, "KIND:COUNT"),
        (":2", AttackSpecInvalid, "KIND:COUNT"),
        ("sign_flip:0", AttackSpecInvalid, "positive integer"),
        ("sign_flip:x", AttackSpecInvalid, "positive integer"),
        ("sign_flip:5", AttackSpecInvalid, "no honest participant"),
        ("backdoor:1", UnknownAttack, "registered: ['constant', 'gaussian'"),
    ],
)
def test_parse_spec_errors(text: str, error: type[Exception], fragment: str) -> None:
    with pytest.raises(error, match=fragment.replace("[", r"\[")):
        parse_attack_spec(text, participants=5)


def test_unknown_attack_lists_registry() -> None:
    with pytest.raises(UnknownAttack, match="sign_flip") as info:
        make_attack("nope")
    assert info.value.code == "ATTACK_UNKNOWN"
