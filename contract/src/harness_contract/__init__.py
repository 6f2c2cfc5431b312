"""The contract's values, closed errors, addresses, content, forms and canonical JSON.

Pure and free of I/O: every other package builds on these frozen dataclasses and enums.
"""
