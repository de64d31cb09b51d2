"""Typed errors of the deployment's configuration files and local state.

Each names the file and the field that was wrong; all are
:class:`~secure_fed.errors.ConfigurationInvalid`, raised before any work.
"""

from __future__ import annotations

from secure_fed.errors import ConfigurationInvalid

__all__ = [
    "DeployConfigInvalid",
    "ParticipantConfigInvalid",
    "ParticipantStateInvalid",
    "PublicSetMismatch",
    "ServerConfigInvalid",
]


class DeployConfigInvalid(ConfigurationInvalid):
    """A deployment file (``participant.toml``, ``server.toml``, state) is invalid.

    Parameters
    ----------
    message
        What was wrong, naming the file and field.
    field
        The dotted field name (``data.path``), or ``""`` for the whole file.
    """

    code = "DEPLOY_CONFIG_INVALID"

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


class ParticipantConfigInvalid(DeployConfigInvalid):
    """A field of ``participant.toml`` is missing, of the wrong type, or out of range."""

    code = "PARTICIPANT_CONFIG_INVALID"


class ServerConfigInvalid(DeployConfigInvalid):
    """A field of ``server.toml`` is missing, of the wrong type, or out of range."""

    code = "SERVER_CONFIG_INVALID"


class PublicSetMismatch(DeployConfigInvalid):
    """The public set a participant holds does not have the SM3 its file or the round names."""

    code = "PUBLIC_SET_MISMATCH"


class ParticipantStateInvalid(DeployConfigInvalid):
    """A participant's state directory is unreadable or belongs to another participant."""

    code = "PARTICIPANT_STATE_INVALID"
