"""SGLang facts: what each release does and prints, a launch command's flags and whether SGLang's own
parser accepts them, where a start-up is, adaptive steps, and the version-drift sentinel."""
