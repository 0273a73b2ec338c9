"""Agents written with other frameworks, run durably and guarded by underway.

Each integration is a subpackage that needs its own extra: ``underway.integrations.pydantic_ai``
needs ``pip install 'underway[pydantic-ai]'``, ``underway.integrations.openai_agents``
``pip install 'underway[openai-agents]'``.
"""

__all__: list[str] = []
