// Package conversations hosts each Company's conversation endpoint (spec
// 8): conversations between Personal Agents and the Company's agent or
// staff, stored as ordered events in PostgreSQL, read by long-polling or
// server-sent events, and woken across replicas by LISTEN/NOTIFY. It also
// serves the Company side (DESIGN.md, "Company Agent"): the Company API
// the Company Agent or its staff answers through, the agent webhook that
// receives each new event, and operations proposed and approved in a
// conversation (docs/operations-extension.md, "Conversations").
//
// Where each part lives:
//
//   - model.go: statuses, event types, messages and their checks, IDs
//     (spec 8.2, 8.4, 8.5, 8.7); company.go: the Company side's checks.
//   - views.go: the JSON shapes answered: Reply, Read, Posted,
//     ConversationView.
//   - store.go and store_*.go, the only files with SQL: the Store and its
//     events (store.go), the Personal Agent side (store_agent.go: start,
//     send, handoff, close, Direct Conversations; spec 8.3, 8.9, 8.10,
//     8.12), the Company side (store_company.go), sweeps (store_sweeps.go),
//     webhook delivery (store_webhook.go), operation outcomes
//     (store_operations.go), the staff console's inbox (store_staff.go).
//   - http.go: what both sides' handlers share, reads (spec 8.5, 8.6;
//     sse.go streams, which wait in ParkStreams) and body decoding; http_agent.go: AgentHandler, the
//     Personal Agent side's routes (spec 8.2) with its errors (8.11, 8.13);
//     http_company.go: CompanyHandler, /company/v1/conversations.
//   - hub.go: the Hub that wakes readers on every replica; feed.go: the
//     staff console's live pages, server-sent events woken by it.
//   - webhook.go: Delivery, the Company Agent's signed webhook.
//   - sweeps.go: handoff timeouts, idle close and retention (spec 8.5,
//     8.9, 8.12), found by the deadlines each conversation keeps across
//     all Companies; SettingsChanged computes them again when a
//     Company's limits change.
//   - operations*.go: Operations, the optional collaborator for operations
//     in conversations: proposals (operations_company.go), approvals
//     (operations_approval.go), the jobs that perform them
//     (operations_jobs.go) and their outcomes (operations_outcome.go).
//
// Errors are httpx errors with the codes of spec 8.13, written by
// httpx.WriteError.
package conversations
