"""kernel_corpus package."""
