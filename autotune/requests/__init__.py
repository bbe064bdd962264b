"""What a user submits: the tuning request, validated strictly, and the model sources it names."""
