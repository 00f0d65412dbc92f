"""Operations over a whole log that an operator runs: garbage collection, verification, copies."""
