"""The runtime's errors as Python sees them.

CommError is what a failed call of the runtime raises (the torch backend's
collectives, waits and fault-tolerance calls): the library's status
(ai_status_t of include/autoinfra.h, negative), the rank that broke the
communicator where the runtime knows it (ai_comm_failure_peer; -1
otherwise) and the message (the call, the cause, ai_last_error()). A
RuntimeError, so code that caught those
goes on catching it. Code that must tell a communication failure from
another error switches on the type and the status, not on the words.
"""

# ai_status_t (include/autoinfra.h).
OK = 0
ERR_INVALID = -1
ERR_NOMEM = -2
ERR_IO = -3
ERR_TIMEOUT = -4
ERR_PEER = -5
ERR_PROTO = -6
ERR_PARSE = -7
ERR_UNSUPPORTED = -8
ERR_INFEASIBLE = -9
ERR_ABORTED = -10
ERR_NOTFOUND = -11
ERR_REVOKED = -12
STATUS_NAMES = {v: "AI_" + k for k, v in dict(globals()).items()
                if k == "OK" or k.startswith("ERR_")}

# The statuses of a communicator that a peer's failure, a stall or a revoke
# left unusable: the job goes on by shrinking to the survivors (the
# header's "usual recovery"; a connection cut mid-frame reads as IO or PROTO).
FAILURES = frozenset((ERR_IO, ERR_TIMEOUT, ERR_PEER, ERR_PROTO, ERR_ABORTED, ERR_REVOKED))


class CommError(RuntimeError):
    """A call of the runtime failed: status (ai_status_t), peer (the rank
    that broke the communicator, else -1), the message as str(e)."""

    def __init__(self, status, peer, message):
        super().__init__(message)
        self.status = int(status)
        self.peer = int(peer)

    @property
    def status_name(self):
        return STATUS_NAMES.get(self.status, "status %d" % self.status)

    @property
    def failure(self):
        """Whether the communicator is left unusable by a peer (FAILURES)."""
        return self.status in FAILURES

    def __reduce__(self):
        return (type(self), (self.status, self.peer, str(self)))
