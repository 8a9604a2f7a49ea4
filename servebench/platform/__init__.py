"""Platform facts: target CPU profiles, CPU features (measured or emulated), the emulation layer
(qemu-user with a sysroot and a CPU view) and the sysroots it runs in."""
