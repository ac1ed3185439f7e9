"""Onboarding an op from its real calls: recording them, inferring its `[[ops]]` entry, writing it."""
