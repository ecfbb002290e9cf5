package operations_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/httpx"
	"github.com/poppyhost/poppyhost/internal/operations"
)

// TestAnswers: the operations answers are JSON errors with their members
// beside error (extension 2, 4, 6), at 403.
func TestAnswers(t *testing.T) {
	a := &operations.Approval{OperationID: "op_1", Revision: "r1"}
	for _, tc := range []struct {
		name string
		err  *httpx.Error
		want string
	}{
		{"extension_required", operations.ExtensionRequired("needs it"),
			`{"error":"extension_required","error_description":"needs it","extension":"operations"}`},
		{"approval_required", operations.ApprovalRequired(map[string]string{"operation_id": "op_1"}),
			`{"error":"approval_required","operation":{"operation_id":"op_1"}}`},
		{"approval_declined", operations.Declined(a, &operations.Decline{}),
			`{"error":"approval_declined","operation_id":"op_1","revision":"r1"}`},
		{"approval_declined with reason", operations.Declined(a, &operations.Decline{Reason: "no",
			Alternative: json.RawMessage(`{"instructions":"call"}`)}),
			`{"error":"approval_declined","alternative":{"instructions":"call"},"operation_id":"op_1","reason":"no","revision":"r1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			httpx.WriteError(rec, httptest.NewRequest(http.MethodGet, "/", nil), tc.err)
			require.Equal(t, http.StatusForbidden, rec.Code)
			require.JSONEq(t, tc.want, rec.Body.String())
			require.JSONEq(t, tc.want, string(tc.err.Body()))
		})
	}
}
