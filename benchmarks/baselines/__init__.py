"""Hand-written slime generate functions, written the way they are written today.

careful: token-exact (engine ids kept, only new text tokenised, observations appended masked).
text:    text-based (the conversation is re-tokenised every turn, outputs re-tokenised for training),
         like slime's search-r1 example.
They import nothing from graphrl.
"""
