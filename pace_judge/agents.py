"""PACE agents (placeholder while the module is written)."""


class ProtocolBuildError(RuntimeError):
    """The agents could not build a valid protocol."""
