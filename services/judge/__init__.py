"""The judge: the trust anchor. Candidate check, contract, sandboxed run, the parent's verdict, honest timing, reward.

The candidate check it starts with (services.core.candidate_check) is shared with the server.
"""
