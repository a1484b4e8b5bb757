"""Threshold cascades (Cascadia 3.3, figure 4): a call goes to the smallest model type first, a judge
grades the answer, and below the stage's threshold h_i the call goes to the next model type."""
