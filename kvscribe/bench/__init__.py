"""`kvscribe bench`: every backend x profile x cache policy on real speech, side by side."""
