"""The slime target: compiled generate/reward functions, launch files, and `graphrl launch`."""
