"""The slash grammar (`/eagle ...` and `eagle chat`) and its router."""
