"""What the harness raises."""


class ClusterError(RuntimeError):
    pass


class RealNodeUnavailable(ClusterError):
    """This machine cannot run a real node; the message says why in one line."""
