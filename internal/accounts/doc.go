// Package accounts owns a Company's user accounts: the people who sign in
// at its issuer. Passwords are hashed with Argon2id (RFC 9106), a
// memory-hard function, so a leaked table resists guessing.
//
// Sign-in is throttled against online guessing, per Company and username,
// in PostgreSQL so every replica shares the count (table login_failures).
// The first FreeFailures failures cost nothing; each one after that locks
// the username for a backoff that doubles from one second up to MaxLock.
// While locked, Authenticate refuses at once with a *ThrottledError
// (errors.Is ErrThrottled) without looking at the password, so a throttled
// guess costs no hashing. The count restarts after FailureWindow without a
// failure and is cleared by a successful sign-in. Unknown usernames are
// counted and locked alike, so probing for usernames is slowed just as much
// and answers the same; their counts share UnknownBuckets rows per Company
// (chosen by an HMAC of the username under the Company's secret), so a
// flood of made-up usernames cannot grow the table. A lock is per
// username, not per client, so anyone can keep an account locked; MaxLock
// bounds how long each lock lasts.
//
// Every Argon2id hash, a real or a dummy one, runs under Limits: a bounded
// number at once in the process. A sign-in beyond them waits in a short
// queue, of which one Company may hold only a share, or is shed with a
// *BusyError (errors.Is ErrBusy) before anything is counted or hashed;
// setting a password waits its turn. Memory held by hashes stays at most
// Hashes × 64 MiB.
package accounts
