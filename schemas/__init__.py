"""Data contracts: the tool catalogue, the completion format and the sample tables."""
