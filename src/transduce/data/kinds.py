"""The kinds of token in a linearized-tree target vocabulary (trees.py's scheme): what the tree constraint
(decoding/constraints.py), the pointer reads (pointers.py) and tree augmentation (augment.py) classify ids by.

"(LABEL" opens a constituent (ROOT_OPEN: the open bracket reserved for the root), ")" closes the innermost one, any
other token is a leaf (a POS tag, or "XX") standing for the next word, EOS ends the output, and OTHER (the other
specials, and the source side's pieces in the joint vocabulary) is never part of a tree.
"""

OTHER, EOS, OPEN, CLOSE, LEAF, ROOT_OPEN = range(6)
