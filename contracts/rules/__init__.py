"""Rules beyond the schema: cross-field checks, defaults and update-time immutability.

Every function here is pure: a parsed manifest in, problems (path + rule in words) out.
"""
