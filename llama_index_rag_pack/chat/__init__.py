"""Chat with citations: the chat engine that condenses follow-ups and its chat store."""
