"""Bindings by operator family: every public module exports BINDINGS (collected by kernel_corpus.bindings)."""
