"""Builds the shipped dataset: wording from data/phrases/, steps and scenarios, the build."""
