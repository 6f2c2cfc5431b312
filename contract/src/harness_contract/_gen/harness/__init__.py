"""Generated from proto/harness/v1 by proto/generate.py. Do not edit."""
