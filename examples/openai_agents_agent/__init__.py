"""An OpenAI Agents SDK agent made durable and guarded by underway (see README.md)."""
