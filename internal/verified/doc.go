// Package verified makes and checks Poppy-Verified: the short-lived JWT,
// signed with a Company's platform key, that tells the Company's origin,
// tools and agent webhook what the platform verified on a Personal
// Agent's request (DESIGN.md, the origin contract). Its typ keeps it from
// passing for an access token and its aud from being replayed at another
// origin.
package verified
