"""The exit codes of vllm-fleet, one home: the API's results, `vllm-fleet status`, `vllm-fleet bench`
and the command line all answer with these (docs/api.md, docs/operations/status.md)."""

#: Success.
EXIT_OK = 0
#: An error before anything ran (the lab, bench's clients): the command says which.
EXIT_ERROR = 1
#: A host failed (a task, or a model's check).
EXIT_FAILED = 2
#: A host could not be reached (`status`: nothing is down, but something could not be read: a
#: node over SSH, its units and devices, or a model's endpoints).
EXIT_UNREACHABLE = 3
#: The inventory is invalid; nothing was changed.
EXIT_INVALID = 4
EXIT_INVALID_INVENTORY = EXIT_INVALID
#: `status`: something is down (a unit not active, /health not answering 200, a device in Critical health).
EXIT_DOWN = 5
#: The command line was wrong (BSD's EX_USAGE).
EXIT_USAGE = 64
#: The run was interrupted (Ctrl-C): the shell's 128 + SIGINT.
EXIT_INTERRUPTED = 130
