"""Storage: POSIX files, the vault layout, ciphertext I/O, user state, the audit log."""
