"""The privacy budget of a participant on its own machine: the ledger's gate over HTTPS.

:class:`RemoteBudgetGate` implements :class:`~privacy_ledger.budget.types.BudgetGate`
(reserve, commit, abort, epsilon spent, noise calibration), fetches the
ledger's budget receipts (:meth:`RemoteBudgetGate.receipt`) and records the
participant's empirical privacy audits as signed ``budget.audited`` entries
(:meth:`RemoteBudgetGate.record_audit`) against the REST API's budget routes
(``/v1/budgets/{participant}/{asset}/...``, docs/api.md), with the participant's
own API token. A
:class:`~secure_fed.learning.private_training.PrivateTrainer` given this gate
charges the central ledger exactly as it charges an in-process
:class:`~privacy_ledger.PrivacyLedger`:

- the ledger's refusals come back as problem+json and are raised again as the
  ledger's own classes (``BudgetExceeded`` with its figures,
  ``CalibrationImpossible``, ``ParticipantSuspended``, ``ReservationExpired``
  ...), so :func:`secure_fed.learning.budget_gate.refusal_errors` still tells a
  refusal (train nothing, spend nothing) from a fault;
- a lost answer is retried safely: every ``reserve`` carries a fresh random
  ``request_id`` that the retry repeats (the ledger answers the reservation it
  already made), ``commit`` is idempotent, aborting twice is a no-op, and an
  audit sent again answers the entry already written;
- an API that cannot be reached, times out, fails TLS or is not ready is
  retried with exponential backoff and jitter for at most ``retry_seconds``
  (``budget.retry_seconds`` in ``participant.toml``), then raises
  :class:`BudgetServiceUnavailable`; a refused token (wrong,
  revoked, another participant's budget) :class:`BudgetServiceDenied`. Neither
  is a refusal: the trainer stops with the error and releases nothing.

TLS: ``https://`` with the CA file the operator gives (no system CAs); plain
``http://`` only with ``insecure_http=True`` (loopback try-outs). The token is
never logged or shown in ``repr``.
"""

from __future__ import annotations

import base64
import logging
import re
import secrets
import ssl
import time
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from privacy_ledger.budget.empirical import RecordedAudit, audit_from_fields
from privacy_ledger.budget.mechanism import MechanismEvent
from privacy_ledger.budget.types import Reservation
from privacy_ledger.errors import BudgetExceeded, LedgerError, ReceiptInvalid, ReservationUnknown
from secure_fed.errors import BudgetError, LearningParameterInvalid

if TYPE_CHECKING:  # the audit's result type only: this module loads no torch
    from secure_fed.learning.privacy_audit import AuditResult

__all__ = [
    "DEFAULT_RETRY_SECONDS",
    "BudgetServiceDenied",
    "BudgetServiceReplyInvalid",
    "BudgetServiceUnavailable",
    "RemoteBudgetGate",
]

logger = logging.getLogger(__name__)

_PROBLEM = "application/problem+json"
_MAX_TOKEN_BYTES = 4096
_ROUND_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
#: How long one call retries an API that does not answer, by default (seconds).
DEFAULT_RETRY_SECONDS = 60.0


class BudgetServiceUnavailable(BudgetError):
    """The budget API could not be reached, timed out, failed TLS, or is not ready.

    Nothing was reserved by the failed call as far as the caller knows; a
    reservation made before the answer was lost expires in the ledger.
    """

    code = "DEPLOY_BUDGET_SERVICE_UNAVAILABLE"


class BudgetServiceDenied(BudgetError):
    """The budget API refused the caller (HTTP 401 / 403, audited by the API).

    The token is missing, wrong, expired or revoked, or the budget is not this
    participant's.
    """

    code = "DEPLOY_BUDGET_SERVICE_DENIED"


class BudgetServiceReplyInvalid(BudgetError):
    """The budget API answered something that is neither its reply nor a known problem."""

    code = "DEPLOY_BUDGET_SERVICE_REPLY_INVALID"


def _ledger_classes() -> dict[str, type[LedgerError]]:
    found: dict[str, type[LedgerError]] = {}
    stack: list[type[LedgerError]] = [LedgerError]
    while stack:
        cls = stack.pop()
        found.setdefault(cls.code, cls)
        stack.extend(cls.__subclasses__())
    return found


def _decimal(value: object, what: str) -> Decimal:
    try:
        return Decimal(str(value))
    except InvalidOperation:
        raise BudgetServiceReplyInvalid(f"{what}: not a decimal: {value!r}") from None


def ledger_error(problem: dict[str, Any]) -> Exception:
    """Return the typed error a problem+json body stands for.

    Ledger codes give the ledger's own class (``BudgetExceeded`` with its
    limit, spent, reserved and requested epsilon); 401/403 give
    :class:`BudgetServiceDenied`; ``API_NOT_READY`` gives
    :class:`BudgetServiceUnavailable`; anything else :class:`BudgetServiceReplyInvalid`.
    """
    code, detail = str(problem.get("code", "")), str(problem.get("detail", ""))
    status = problem.get("status")
    message = detail.removeprefix(f"[{code}] ")
    if code == BudgetExceeded.code:
        figures = problem.get("budget") or {}
        return BudgetExceeded(
            message,
            **{k: _decimal(figures.get(k), k) for k in ("limit", "spent", "reserved", "requested")},
        )
    cls = _ledger_classes().get(code)
    if cls is not None:
        return cls(message)
    if status in (401, 403):
        return BudgetServiceDenied(f"{code}: {message}")
    if code == "API_NOT_READY" or status in (502, 503, 504):
        return BudgetServiceUnavailable(f"{code or status}: {message}")
    return BudgetServiceReplyInvalid(f"{code or status}: {message}")


class RemoteBudgetGate:
    """The :class:`~privacy_ledger.budget.types.BudgetGate` of a participant, over HTTPS.

    Parameters
    ----------
    base_url
        ``https://host:port`` of ``secure-fed api`` (``http://`` only with
        ``insecure_http``).
    token
        The participant's API token (``secure-fed api token create --role
        participant --participant ID``); see :meth:`from_token_file`.
    ca_file
        PEM file of the CA that signed the API's certificate (required for https).
    insecure_http
        Allow plain HTTP (development on loopback only; the name says it).
    timeout
        Seconds for connecting and for each whole answer.
    attempts
        Most tries per call when the answer is lost or the API is not serving
        (1..100); ``None`` (default): as many as ``retry_seconds`` allows.
    retry_seconds
        Bound on the time one call keeps retrying (0..3600 s, default 60, well
        below a round's reply deadline); the waits between tries grow
        exponentially with jitter (see :meth:`_call`). Past it the call raises
        :class:`BudgetServiceUnavailable`.
    ttl_seconds
        Lifetime of a reservation in the ledger unless committed first.
    participant_id
        The participant the token speaks for: lets ``commit`` and ``abort``
        find a reservation this gate did not make (a restarted participant
        resuming by reservation id); without it they accept only ids reserved
        through this gate.

    Raises
    ------
    LearningParameterInvalid
        A missing CA file for https, a scheme that does not match, or a bad
        number (named).
    """

    def __init__(
        self,
        *,
        base_url: str,
        token: str,
        ca_file: Path | None = None,
        insecure_http: bool = False,
        timeout: float = 30.0,
        attempts: int | None = None,
        retry_seconds: float = DEFAULT_RETRY_SECONDS,
        ttl_seconds: float = 3600.0,
        participant_id: str | None = None,
    ) -> None:
        if not isinstance(token, str) or not token.startswith("sft_"):
            raise LearningParameterInvalid("token: expected an API token 'sft_<id>.<secret>'")
        if attempts is not None and not (
            isinstance(attempts, int) and not isinstance(attempts, bool) and 1 <= attempts <= 100
        ):
            raise LearningParameterInvalid(f"attempts: must be 1..100 or None, got {attempts!r}")
        if not (
            isinstance(retry_seconds, int | float)
            and not isinstance(retry_seconds, bool)
            and 0 <= retry_seconds <= 3600
        ):
            raise LearningParameterInvalid(
                f"retry_seconds: must be in [0, 3600] seconds, got {retry_seconds!r}"
            )
        if not (isinstance(timeout, int | float) and timeout > 0):
            raise LearningParameterInvalid(f"timeout: must be > 0 seconds, got {timeout!r}")
        if not (isinstance(ttl_seconds, int | float) and 0 < ttl_seconds <= 7 * 86400):
            raise LearningParameterInvalid(
                f"ttl_seconds: must be in (0, 7 days], got {ttl_seconds!r}"
            )
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(
            base_url=self.base_url,
            verify=_verify(self.base_url, ca_file, insecure_http),
            timeout=timeout,
            trust_env=False,
            headers={"Authorization": f"Bearer {token}"},
        )
        self.attempts, self.ttl_seconds = attempts, float(ttl_seconds)
        self.retry_seconds = float(retry_seconds)
        self.participant_id = participant_id
        self._owner: dict[str, tuple[str, str]] = {}

    @classmethod
    def from_token_file(cls, *, token_file: Path, **kwargs: Any) -> RemoteBudgetGate:
        """Build the gate with the token read from ``token_file`` (one line, 0600).

        Raises
        ------
        LearningParameterInvalid
            The file is unreadable, too large, or not a token.
        """
        try:
            with token_file.open("rb") as handle:
                data = handle.read(_MAX_TOKEN_BYTES + 1)
        except OSError as exc:
            raise LearningParameterInvalid(f"token_file {token_file}: {exc.strerror}") from None
        if len(data) > _MAX_TOKEN_BYTES:
            raise LearningParameterInvalid(f"token_file {token_file}: larger than a token")
        return cls(token=data.decode("utf-8", "replace").strip(), **kwargs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.base_url!r})"

    def close(self) -> None:
        """Close the connection pool."""
        self._client.close()

    def __enter__(self) -> RemoteBudgetGate:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the BudgetGate protocol ---------------------------------------------------

    def reserve(
        self,
        participant_id: str,
        asset_id: str,
        event: MechanismEvent,
        *,
        round_id: str | None = None,
        request_id: str | None = None,
    ) -> Reservation:
        """Hold budget for ``event``; a lost answer is retried with the same request id.

        ``request_id`` (16-128 characters of ``[A-Za-z0-9_-]``) is the caller's,
        e.g. journalled before the request leaves (:class:`~secure_fed.deploy.
        participant_state.BudgetRecorder`); by default a fresh random one.

        Raises
        ------
        BudgetExceeded, ParticipantSuspended
            The ledger refused (nothing held); in ``refusal_errors()``.
        BudgetNotSet, LedgerParameterInvalid, ReservationConflict
            The ledger's other answers, as in process.
        BudgetServiceUnavailable, BudgetServiceDenied, BudgetServiceReplyInvalid
            The API could not be asked, refused the token, or answered nonsense.
        """
        if not isinstance(event, MechanismEvent):
            raise LearningParameterInvalid(f"event: expected a MechanismEvent, got {event!r}")
        body = {
            "request_id": secrets.token_urlsafe(18) if request_id is None else request_id,
            "round_id": round_id,
            "event": {
                "noise_multiplier": event.noise_multiplier,
                "sample_rate": event.sample_rate,
                "steps": event.steps,
                "delta": event.delta,
                "max_grad_norm": event.max_grad_norm,
                "mechanism": event.mechanism,
                "sampler": event.sampler,
                "versions": dict(event.versions),
            },
            "ttl_seconds": self.ttl_seconds,
        }
        answer = self._call("POST", _path(participant_id, asset_id, "reservations"), body, 201)
        return _reservation(answer, event)

    def commit(self, reservation_id: str) -> None:
        """Charge a held reservation (idempotent; retried when the answer is lost).

        Raises
        ------
        ReservationUnknown, ReservationNotActive, ReservationExpired
            The ledger's answers, as in process.
        BudgetServiceUnavailable, BudgetServiceDenied, BudgetServiceReplyInvalid
        """
        self._resolve(reservation_id, "commit", None)

    def abort(self, reservation_id: str, *, released_anything: bool = False) -> None:
        """Release a held reservation, or charge it if ``released_anything``.

        Raises
        ------
        ReservationUnknown, ReservationNotActive
            The ledger's answers, as in process.
        BudgetServiceUnavailable, BudgetServiceDenied, BudgetServiceReplyInvalid
        """
        self._resolve(reservation_id, "abort", {"released_anything": bool(released_anything)})

    def epsilon_spent(self, participant_id: str, asset_id: str) -> Decimal:
        """Epsilon of the committed history, as the ledger recomputes it.

        Raises
        ------
        BudgetNotSet, BudgetServiceUnavailable, BudgetServiceDenied, BudgetServiceReplyInvalid
        """
        answer = self._call("GET", _path(participant_id, asset_id, "epsilon-spent"), None, 200)
        return _decimal(answer.get("epsilon_spent"), "epsilon_spent")

    def calibrate_noise(
        self,
        participant_id: str,
        asset_id: str,
        *,
        rounds: int,
        steps_per_round: int,
        sample_rate: float,
        max_grad_norm: float,
        epsilon: str | Decimal | None = None,
    ) -> float:
        """Smallest noise multiplier keeping history plus the plan within budget.

        Raises
        ------
        CalibrationImpossible
            No noise multiplier fits (in ``refusal_errors()``).
        BudgetServiceUnavailable, BudgetServiceDenied, BudgetServiceReplyInvalid
        """
        body = {
            "rounds": rounds,
            "steps_per_round": steps_per_round,
            "sample_rate": sample_rate,
            "max_grad_norm": max_grad_norm,
            "epsilon": None if epsilon is None else format(Decimal(epsilon), "f"),
        }
        answer = self._call("POST", _path(participant_id, asset_id, "calibrate-noise"), body, 200)
        sigma = answer.get("noise_multiplier")
        if not isinstance(sigma, int | float) or isinstance(sigma, bool):
            raise BudgetServiceReplyInvalid(f"noise_multiplier: not a number: {sigma!r}")
        return float(sigma)

    # -- budget receipts -----------------------------------------------------------

    def receipt(self, *, participant_id: str, asset_id: str, round_id: str) -> bytes:
        """Fetch the ledger's signed receipt of a committed charge of ``round_id``.

        The same bytes :meth:`privacy_ledger.budget.receipts.ReceiptIssuer.issue`
        returns in process (same keywords); the aggregator verifies them.

        Parameters
        ----------
        participant_id, asset_id
            Whose budget (the token must speak for ``participant_id``).
        round_id
            The ledger round label (``r3``).

        Returns
        -------
        bytes
            The receipt as the API's issuer signed it.

        Raises
        ------
        LearningParameterInvalid
            ``round_id`` is not a round label (letters, digits, ``._:@-``).
        ReceiptUnavailable
            The ledger has no committed charge of that round (its own class).
        ReceiptInvalid
            The API's answer holds no decodable receipt.
        BudgetServiceUnavailable, BudgetServiceDenied, BudgetServiceReplyInvalid
            The API could not be asked, refused the token, or answered nonsense.
        """
        if not (isinstance(round_id, str) and _ROUND_LABEL.fullmatch(round_id)):
            raise LearningParameterInvalid(f"round_id: not a ledger round label: {round_id!r}")
        tail = f"receipts/{round_id}"
        answer = self._call("GET", _path(participant_id, asset_id, tail), None, 200)
        try:
            return base64.b64decode(str(answer["receipt_b64"]), validate=True)
        except (KeyError, ValueError):
            raise ReceiptInvalid(f"the API's receipt of {round_id} is malformed") from None

    # -- empirical privacy audits -------------------------------------------------

    def record_audit(self, result: AuditResult) -> RecordedAudit:
        """Record ``result`` in the federation's ledger as a signed ``budget.audited`` entry.

        What :func:`secure_fed.federation.audit_record.record_audit` does in
        process: the API writes the entry with the accounted epsilon it
        recomputes over the audited rounds (the trainer's own figure is not
        sent). A lost answer is retried; the API answers a resent audit with
        the entry it already wrote.

        Parameters
        ----------
        result
            The audit of the participant's budget (its participant and asset
            name the budget; the token must speak for the participant).

        Returns
        -------
        RecordedAudit
            The stored entry (its log index, time, and the audit with the
            ledger's accounted epsilon).

        Raises
        ------
        EmpiricalAuditInvalid
            The ledger refused the figures, or has no committed charge of the
            audited rounds (its own class, as in process).
        BudgetNotSet
            No such budget.
        BudgetServiceUnavailable, BudgetServiceDenied, BudgetServiceReplyInvalid
            The API could not be asked, refused the token, or answered nonsense.
        """
        fields_of = getattr(result, "fields", None)
        if not callable(fields_of) or not isinstance(getattr(result, "participant", None), str):
            raise LearningParameterInvalid(f"result: expected an AuditResult, got {result!r}")
        body = {
            k: v
            for k, v in fields_of().items()
            if k not in ("participant", "asset", "epsilon_accounted")
        }
        path = _path(result.participant, result.asset, "audits")
        answer = self._call("POST", path, body, 201)
        try:
            fields = {
                "participant": answer["participant_id"],
                "asset": answer["asset_id"],
                "epsilon_accounted": answer["epsilon_accounted_stated"],
                **{k: answer[k] for k in body},
            }
            return RecordedAudit(
                index=int(answer["entry"]),
                time=str(answer["time"]),
                audit=audit_from_fields(fields),
            )
        except (KeyError, TypeError, ValueError, LedgerError) as exc:
            raise BudgetServiceReplyInvalid(f"audit: malformed answer ({exc})") from None

    # -- plumbing ------------------------------------------------------------------

    def _resolve(self, reservation_id: str, verb: str, body: dict[str, Any] | None) -> None:
        owner = self._owner.get(reservation_id) or self._find(reservation_id)
        path = _path(*owner, f"reservations/{reservation_id}/{verb}")
        self._call("POST", path, body if body is not None else {}, 200)

    def _find(self, reservation_id: str) -> tuple[str, str]:
        """Look up the budget of a reservation this gate did not make (after a restart)."""
        if self.participant_id is None:
            raise LearningParameterInvalid(
                f"reservation_id: {reservation_id!r} was not reserved through this gate "
                "(give participant_id to resume reservations by id)"
            )
        listed = self._call("GET", f"/v1/budgets/{self.participant_id}", None, 200)
        for budget in listed.get("budgets", []):
            asset = str(budget.get("asset_id"))
            self._call("GET", _path(self.participant_id, asset, "reservations"), None, 200)
            if reservation_id in self._owner:
                return self._owner[reservation_id]
        raise ReservationUnknown(f"reservation_id: {reservation_id!r} does not exist")

    def _call(self, method: str, path: str, body: dict[str, Any] | None, ok: int) -> dict[str, Any]:
        """Send one request, retrying a lost answer or an API not ready with bounded backoff.

        Every request this gate sends is safe to repeat, so a try whose answer
        was lost (the ledger may have applied it) is sent again unchanged:

        - ``reserve`` carries the caller's ``request_id``; the ledger derives the
          reservation id from it and answers a repeat with the reservation
          already made, in its current state (a repeat with another round or
          mechanism is ``ReservationConflict``, never a second hold);
        - ``commit`` of a committed reservation charges nothing more and answers
          the same committed reservation; ``abort`` of an aborted or expired one
          is a no-op, and ``abort(released_anything=True)`` of a committed one
          answers it committed;
        - an audit sent again answers the entry already written;
        - the rest (spent epsilon, calibration, receipts, listings) only read.

        Retried: transport errors (refused, reset, timed out; not a
        certificate that fails verification, which no retry mends) and answers
        meaning the API is not serving (502, 503, 504, ``API_NOT_READY``). The
        ledger's refusals and denials are final at once. Waits grow
        exponentially from ``_FIRST_WAIT`` to ``_LONGEST_WAIT`` with jitter
        from :mod:`secrets`; no new try starts once ``retry_seconds`` would be
        exceeded (so a call takes at most about ``retry_seconds`` plus one
        ``timeout``), nor after ``attempts`` tries when that is set.
        """
        started = time.monotonic()
        last: Exception | None = None
        tries = 0
        while True:
            tries += 1
            try:
                response = self._client.request(method, path, json=body)
            except (httpx.TransportError, ssl.SSLError) as exc:
                last = exc
                if _untrusted(exc):  # a certificate that does not verify will not start to
                    break
            else:
                try:
                    return self._answer(response, ok)
                except BudgetServiceUnavailable as exc:
                    last = exc
            wait = _backoff(tries)
            spent = time.monotonic() - started
            if (self.attempts is not None and tries >= self.attempts) or (
                spent + wait > self.retry_seconds
            ):
                break
            logger.warning(
                "budget API %s %s failed (try %d, retrying in %.2f s, %.1f of %.1f s used): %s",
                method,
                path,
                tries,
                wait,
                spent,
                self.retry_seconds,
                last,
            )
            time.sleep(wait)
        logger.error(
            "budget API %s %s: giving up after %d tries in %.1f s: %s",
            method,
            path,
            tries,
            time.monotonic() - started,
            last,
        )
        raise BudgetServiceUnavailable(
            f"{self.base_url}{path}: no answer after {tries} tries "
            f"(retry_seconds {self.retry_seconds:g}): {last}"
        ) from last

    def _answer(self, response: httpx.Response, ok: int) -> dict[str, Any]:
        kind = response.headers.get("content-type", "").split(";")[0].strip()
        try:
            data = response.json()
        except ValueError:
            data = None
        if response.status_code == ok and isinstance(data, dict):
            self._remember(data)
            return data
        if kind == _PROBLEM and isinstance(data, dict):
            raise ledger_error(data)
        if response.status_code in (502, 503, 504):
            raise BudgetServiceUnavailable(f"{response.url} answered {response.status_code}")
        raise BudgetServiceReplyInvalid(f"{response.url} answered {response.status_code} {kind}")

    def _remember(self, data: dict[str, Any]) -> None:
        """Keep which budget each reservation id belongs to (commit and abort need it)."""
        for row in [data, *(data.get("reservations") or [])]:
            if isinstance(row, dict) and {"id", "participant_id", "asset_id"} <= row.keys():
                self._owner[str(row["id"])] = (str(row["participant_id"]), str(row["asset_id"]))


#: First wait between tries, and the longest (seconds); the wait doubles in between.
_FIRST_WAIT, _LONGEST_WAIT = 0.25, 8.0


def _untrusted(exc: BaseException) -> bool:
    """Whether the transport error is a certificate the CA file does not verify."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, ssl.SSLCertVerificationError):
            return True
        seen = seen.__cause__ or seen.__context__
    return "CERTIFICATE_VERIFY_FAILED" in str(exc)


def _backoff(tries: int) -> float:
    """Wait after ``tries`` failed tries: ``min(longest, first * 2**(tries-1))``, jittered.

    The jitter (from :mod:`secrets`) draws the wait uniformly from the upper
    half of the step, so participants cut off together do not retry in step.
    """
    step = min(_LONGEST_WAIT, _FIRST_WAIT * float(2 ** min(tries - 1, 16)))
    return step / 2 + step / 2 * secrets.randbelow(1001) / 1000


def _verify(base_url: str, ca_file: Path | None, insecure_http: bool) -> ssl.SSLContext | bool:
    if base_url.startswith("http://"):
        if not insecure_http:
            raise LearningParameterInvalid(
                f"base_url: plain http ({base_url}) needs insecure_http=True (development only)"
            )
        return False
    if not base_url.startswith("https://"):
        raise LearningParameterInvalid(f"base_url: expected https://host:port, got {base_url!r}")
    if ca_file is None:
        raise LearningParameterInvalid(
            "ca_file: https needs the CA that signed the API's certificate"
        )
    try:
        context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=str(ca_file))
    except (OSError, ssl.SSLError) as exc:
        raise LearningParameterInvalid(f"ca_file {ca_file}: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def _path(participant_id: str, asset_id: str, tail: str) -> str:
    return f"/v1/budgets/{participant_id}/{asset_id}/{tail}"


def _reservation(data: dict[str, Any], event: MechanismEvent) -> Reservation:
    try:
        return Reservation(
            id=str(data["id"]),
            participant_id=str(data["participant_id"]),
            asset_id=str(data["asset_id"]),
            round_id=data["round_id"],
            event=event,
            state=str(data["state"]),
            epsilon_projected=_decimal(data["epsilon_projected"], "epsilon_projected"),
            created_at=float(data["created_at"]),
            expires_at=float(data["expires_at"]),
            resolved_at=None if data["resolved_at"] is None else float(data["resolved_at"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise BudgetServiceReplyInvalid(f"reservation: malformed answer ({exc})") from None
