"""The local server's dev reload: a new generation of a handler swapped in between batches."""
