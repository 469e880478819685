"""Operations: one module per use case. Surfaces call these and render what they return."""
