// Package conversations hosts each Company's conversation endpoint (spec
// 8): conversations between Personal Agents and the Company's agent or
// staff, stored as ordered events in PostgreSQL, read by long-polling or
// server-sent events, and woken across replicas by LISTEN/NOTIFY.
package conversations
