"""The shipped dataset, the tool catalogue and the generator that makes them."""
