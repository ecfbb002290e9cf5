package operations

import (
	"context"
	"net/http"
	"strconv"

	"github.com/poppyhost/poppyhost/internal/httpx"
)

// The answers every interface gives a Personal Agent about operations
// (extension 2, 4, 6, 7), as JSON errors.

// RetryAfter is the Retry-After, in seconds, of an operation still being
// performed.
const RetryAfter = "5"

// ExtensionRequired is extension_required for a request that does not
// declare the extension (extension 2); desc says what needed it.
func ExtensionRequired(desc string) *httpx.Error {
	return &httpx.Error{Code: httpx.CodeExtensionRequired, Description: desc, Extra: map[string]any{"extension": Name}}
}

// ApprovalRequired is approval_required with op, the operation to approve
// (extension 4).
func ApprovalRequired(op any) *httpx.Error {
	return &httpx.Error{Code: CodeApprovalRequired, Extra: map[string]any{"operation": op}}
}

// Declined is approval_declined for approval a (extension 6), with the
// Company's reason and alternative when it gave them.
func Declined(a *Approval, d *Decline) *httpx.Error {
	extra := map[string]any{"operation_id": a.OperationID, "revision": a.Revision}
	if d.Reason != "" {
		extra["reason"] = d.Reason
	}
	if len(d.Alternative) > 0 && string(d.Alternative) != "null" {
		extra["alternative"] = d.Alternative
	}
	return &httpx.Error{Code: CodeApprovalDeclined, Extra: extra}
}

// WritePerforming answers a retry of an operation being performed, or
// whose outcome is unknown: 503 with Retry-After, never a failure
// (extension 7), so not logged as one.
func WritePerforming(w http.ResponseWriter, r *http.Request) {
	httpx.WriteUnavailable(w, r, RetryAfter, performingDesc)
}

// WriteRetry answers an approval whose origin performed nothing and asked
// for the request again later: the Personal Agent sends the same request
// with the same approval again (extension 7), which can perform it.
func WriteRetry(w http.ResponseWriter, r *http.Request, after int) {
	httpx.WriteUnavailable(w, r, strconv.Itoa(after), "nothing was performed yet: the Company asks for the request "+
		"again later; send the same request with the same approval after Retry-After seconds")
}

// PerformingBody is the body of a 503 while an operation is performed.
func PerformingBody(ctx context.Context) map[string]string {
	return map[string]string{"error": httpx.CodeUnavailable, "error_description": performingDesc,
		"request_id": httpx.RequestID(ctx)}
}

// performingDesc describes the 503 of an operation being performed.
const performingDesc = "the operation is being performed; send the same request again after Retry-After seconds"

// WriteStored answers with the origin's stored answer to an approved
// request (extension 7).
func WriteStored(w http.ResponseWriter, resp *Response) {
	for name, v := range map[string]string{"Content-Type": resp.ContentType, "Location": resp.Location, "ETag": resp.ETag} {
		if v != "" {
			w.Header().Set(name, v)
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(resp.Status)
	_, _ = w.Write(resp.Body)
}
