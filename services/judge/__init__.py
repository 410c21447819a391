"""The judge: the trust anchor. Static checks, contract, sandboxed correctness, honest timing, reward.

Import-light on purpose: the server imports services.judge.static_check before every swap.
"""
