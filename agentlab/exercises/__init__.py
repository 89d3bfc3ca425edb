"""Checks for the lessons' exercises: each raises a clear AssertionError when an answer is wrong."""
