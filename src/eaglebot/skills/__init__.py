"""Shipped skills: one module per skill; `facts` (commands + pure parsers) and `lib` (helpers) are not skills."""
