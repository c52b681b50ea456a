# Sourced by run-glibc.sh, run-aarch64.sh and run-vm.sh: the gtest filters of the passes that run
# part of the suite. Each of those scripts also runs the whole suite once in its environment
# (with glibc's rseq area), so a partial pass need only run what the area's owner, or rseq's
# absence, changes. Every structure reaches the area through the one offset from the thread
# pointer that registration sets (internal/c_getcpu.h), whoever owns it; fallback mode swaps the
# section layer's commit, below every structure. Above the layers named here, a pass would run
# the same code the full pass runs.

# The layers that register the area, read its fields and commit or abort through it: the
# fields, glibc's area and its extent, registration, the getcpu cache, the operations and the
# sections, the counter at their edge.
area_layers='UsableFields.*:GlibcAreaExtent.*:Registration.*:GetcpuCache.*:Ops*:CurrentOps*:Aborts.*:Sections.*:Counter*'

# Those, and what changes with the mode around them: the switch to fallback mode, the
# process's events (fork, exec, threads stopped inside a section, remote drains through
# membarrier's fence) and percpu malloc's per-CPU caches and glibc API, whose fast paths are
# sections.
mode_layers="$area_layers:FallbackSwitch.*:ProcessEvents.*:StoppedThreads.*:PoolFork.*:RemoteDrain.*:MallocGlibcApi.*:MallocAllocator.*:MallocCpuCache.*"
