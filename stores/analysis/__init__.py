"""Ingest-time text analysis: entities, claims, speakers, session positions, chat messages, and the
text a turn is indexed by."""
