// Package audit keeps the audit log: one entry for every change made
// through the admin API (/admin/v1), the Company API (/company/v1) and the
// Company console (/console/{slug}), saying who made it (the operator
// token or Company API key, by id and prefix, never the secret, or the
// staff member, by id), what it was (the route and the names of the
// fields it changed, never their values), when, and for which Company.
//
// Middleware opens a pending entry for every write request; the
// authentication middleware names the actor (SetActor) and the Company
// (SetCompany). A handler whose store writes in a transaction records the
// entry in it with one line, audit.Record(ctx, tx), so the change and its
// entry commit together; Note adds the names of the fields changed. For a
// write that did not record itself, Middleware records the entry when the
// handler answered with success. Exempt marks routes whose writes are not
// administration (a conversation's messages, which the conversation keeps
// itself).
package audit
