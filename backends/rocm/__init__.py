"""The ROCm backend: arch table, ROCDL lowering and code-object emission, runtime devices, emulator."""
