"""Integrations with agent frameworks: pydantic-ai and the OpenAI Agents SDK."""

__all__: list[str] = []
