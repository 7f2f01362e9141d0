"""Task settings shared by the tests: the one-digit addition the offline demo uses."""

ONE_DIGIT_ADD = {
    "min_terms": 2,
    "max_terms": 2,
    "min_digits": 1,
    "max_digits": 1,
    "operators": ["+"],
    "allow_parentheses": False,
    "allow_negation": False,
}
