// Package demoshop is the origin of dev mode's demo Company, Stormline
// Outfitters: the shop of the spec's examples, behind the poppyhost
// platform as the origin contract of DESIGN.md describes it. It is an
// http.Handler that serves, on one base URL:
//
//   - {base}/api: an orders API, described by {base}/openapi.json, for the
//     platform's API gateway (docs/gateway.md): list orders, an order,
//     exchange an item, return an item, change the shipping address;
//   - {base}/tools/{name}: MCP tools for the hosted MCP server
//     (docs/gateway.md section 5): search_products, size_help and
//     exchange_item;
//   - {base}: a small website for the website proxy (docs/website.md):
//     the orders page and an exchange form with a Continue button.
//
// Every request that acts for someone carries Poppy-Verified, checked
// against the Company's key set with the aud of its part: {base}/api for
// the API, the tool's URL for a tool, {base} for the website. A JWT made
// for one part is refused by the others. The shop trusts nothing else
// about a request: the account is the claim's, and so are the scopes.
//
// Exchanges and returns need approval (Operations extension v3, through
// docs/operations-extension.md): without an operation_id claim the shop
// performs nothing and answers application/poppy-proposal+json with the
// terms; with one it performs the action once per Idempotency-Key and
// answers every repeat of the key with the first answer. The API, the
// exchange_item tool and the website share that logic and that record.
// Prices do not move in the demo, so the terms an approval covers are the
// ones the shop computes again from the request when it performs.
// An exchange that costs more is declined when the Personal Agent, not
// the User, approved it.
//
// State is kept in memory, not in PostgreSQL: the shop is a demo peer of
// the platform, not part of it, and owes the platform's database nothing.
// Orders are seeded per account ID (Seed), since the origin only ever
// sees the account's ID; a restart forgets exchanges, returns and
// idempotency keys and starts again from the seed. A real origin keeps
// them in its database, the key in the same transaction as the action.
//
// StallNextExchange is a test hook: the next approved exchange is
// performed and recorded, but its answer is held until the caller gives
// up, as an origin that times out after doing the work (the retry that
// follows gets the recorded answer).
package demoshop
