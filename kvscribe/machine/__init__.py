"""Where kvscribe runs: the CPU and its cores, memory, OpenMP's waiting threads, malloc's
arenas, the process's resident memory."""
