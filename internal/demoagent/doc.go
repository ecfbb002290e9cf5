// Package demoagent is the small, rule-based Company Agent of dev mode's
// demo Company, Stormline Outfitters. It is an ordinary client of the
// platform: an http.Handler serving the agent webhook
// (docs/company-agent.md sections 2 to 5) that answers through the
// Company API (section 6) with an API key, so the README demo can hold a
// conversation, hand off to a person and see user_requested (spec 8.9,
// 8.10, 8.11).
//
// Each delivery is checked with the webhook secret (Standard Webhooks,
// section 3) and dropped when its webhook-id was handled already. A
// Personal Agent message is answered by the first rule whose words it
// contains (whole words, any case, a plural "s" allowed):
//
//  1. "specialist": posts user_requested, asking to talk with the User;
//  2. "person", "human", "agent": nothing; the Personal Agent asks for a
//     person with a handoff;
//  3. "return": the return policy;
//  4. "exchange", "jacket": signed in with orders:read and orders:write,
//     proposes the spec's exchange of the Stormline Jacket (M) on order
//     ord_7Hk2, or on the order the message names (ord_...), for the
//     insulated one as an operation (Operations
//     extension v3, "Conversations"): a message with
//     extensions.operations.proposal, the shop's own terms
//     (demoshop.ExchangeProposal) and the request that performs it on the
//     orders API. A Personal Agent that does not declare the extension
//     gets the offer as text, with data {"replacement_sku":
//     "stormline-insulated-m", "price_difference": 70}. Signed out, or
//     without those scopes, it posts an authorization need for them;
//  5. "order": without orders:read in the delivery's Poppy-Verified facts
//     (signed out: account ""), posts an authorization need for
//     orders:read; with it, the status of the demo order ord_7Hk2;
//  6. anything else: a short help text.
//
// A message that carries an approval is not answered by these rules: its
// text approves nothing (extension 6), and the outcome follows.
// A state event with status queued (a handoff) makes "Alex", a person,
// join after JoinDelay and say hello. An operation's outcome
// (conversation.operation) is told in a message: done, declined (with
// extensions.operations.declined), still going through, or not done.
// Other events are acknowledged.
//
// Answers are posted before the delivery is acknowledged (a failure
// answers 502, and the platform retries), with message IDs made from the
// event ID, so a retried delivery does not post a message twice.
//
// Each delivery's Poppy-Verified (section 4) is checked as any Company
// Agent should: signed with the Company's key set (Options.JWKSURL, through
// demoshop.KeySet, the shop's own verifier), iss the Company's identifier,
// aud the webhook's URL, not expired, and naming the delivery's own
// conversation and event (and operation, for an outcome). A delivery
// whose Poppy-Verified is missing or does not verify is refused with 401
// and nothing is posted; one that cannot be checked yet (the key set
// cannot be fetched, or names a key fetched again only after a moment)
// gets 503, so the platform retries it. The rules read the account,
// scopes and extensions from the verified claims only.
package demoagent
