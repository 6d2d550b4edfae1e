"""The exact operations (RFC-0005): stored-record enumeration and aggregation over structured claims."""
