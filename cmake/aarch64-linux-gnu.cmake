# Cross build for 64-bit Arm with Debian's g++-aarch64-linux-gnu (the `aarch64` presets).
# Libraries come from Debian's arm64 multiarch packages (libgtest-dev:arm64, ...; see
# scripts/run-aarch64.sh). Tests run under qemu-aarch64 (user-mode emulation, which lacks the
# rseq system call: fallback mode) when ctest runs them here, and on an emulated arm64 kernel
# with rseq under scripts/run-aarch64.sh.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
# The runtime under emulation is the multiarch one (libc6:arm64 and the other :arm64 packages, at
# their usual paths: -L /). Not -L /usr/aarch64-linux-gnu: that holds the cross package's ld.so,
# which would load libc6:arm64's libc.so.6 from /lib/aarch64-linux-gnu (a different build whose
# private _rtld_global layout differs: pthread_create then loops forever).
set(CMAKE_CROSSCOMPILING_EMULATOR qemu-aarch64 -L /)
# pkg-config must find the arm64 .pc files, not the host's.
set(ENV{PKG_CONFIG_LIBDIR} "/usr/lib/aarch64-linux-gnu/pkgconfig:/usr/share/pkgconfig")
