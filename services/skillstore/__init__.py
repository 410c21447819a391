"""The skill store: a library of proven kernel recipes, indexed by physics, chosen by a bandit."""
