package crosstenant_test

import (
	"crypto/sha256"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/poppyhost/poppyhost/internal/sealing"
	"github.com/poppyhost/poppyhost/internal/testkit/testdb"
)

// Rows that no exported store method makes: the suite inserts them as the
// HTTP handlers' unexported store methods would, and reads back what no
// exported method returns.

func hashOf(s string) []byte {
	h := sha256.Sum256([]byte(s))
	return h[:]
}

// session inserts an active Session of the Company.
func (w *world) session(t *testing.T, companyID int64, clientID, sid string) {
	t.Helper()
	_, err := w.pool.Exec(w.ctx, `INSERT INTO sessions (company_id, client_id, sid, user_id) VALUES ($1, $2, $3, 'usr_1')`,
		companyID, clientID, sid)
	require.NoError(t, err)
}

// feedback inserts a feedback report of the Company.
func (w *world) feedback(t *testing.T, companyID int64, task string) {
	t.Helper()
	_, err := w.pool.Exec(w.ctx, `INSERT INTO feedback (company_id, client_id, user_id, sid, task, description)
		VALUES ($1, 'https://agent.test/client', 'usr_1', 'sid_1', $2, 'could not')`, companyID, task)
	require.NoError(t, err)
}

// webSession inserts a web session of the Company under token, acting for
// accountID, for a Session that must exist.
func (w *world) webSession(t *testing.T, companyID int64, token, clientID, sid string, accountID int64) {
	t.Helper()
	_, err := w.pool.Exec(w.ctx, `INSERT INTO web_sessions (company_id, token, client_id, sid, account_id, scopes,
			extensions, created_at, expires_at)
		VALUES ($1, $2, $3, $4, $5, '{orders}', '{}', now(), now() + interval '1 hour')`,
		companyID, hashOf(token), clientID, sid, accountID)
	require.NoError(t, err)
}

// webSessionAccount returns the account a web session of the Company acts
// for (0: none) and whether it has ended.
func (w *world) webSessionAccount(t *testing.T, companyID int64, token string) (int64, bool) {
	t.Helper()
	var (
		account *int64
		ended   *time.Time
	)
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT account_id, ended_at FROM web_sessions
		WHERE company_id = $1 AND token = $2`, companyID, hashOf(token)).Scan(&account, &ended))
	if account == nil {
		return 0, ended != nil
	}
	return *account, ended != nil
}

// deviceGrant inserts an approved device grant of the Company.
func (w *world) deviceGrant(t *testing.T, companyID int64, deviceCode, clientID string, accountID int64) {
	t.Helper()
	_, err := w.pool.Exec(w.ctx, `INSERT INTO device_grants (company_id, device_code, user_code, client_id, scopes,
			status, account_id, interval_seconds, created_at, expires_at)
		VALUES ($1, $2, $3, $4, '{orders}', 'approved', $5, 5, now(), now() + interval '10 minutes')`,
		companyID, hashOf(deviceCode), deviceCode, clientID, accountID)
	require.NoError(t, err)
}

// deviceGrantStatus returns the status of a device grant of the Company.
func (w *world) deviceGrantStatus(t *testing.T, companyID int64, deviceCode string) string {
	t.Helper()
	var status string
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT status FROM device_grants WHERE company_id = $1 AND device_code = $2`,
		companyID, hashOf(deviceCode)).Scan(&status))
	return status
}

// webhookSecret returns the Company's current conversation webhook secret.
func (w *world) webhookSecret(t *testing.T, companyID int64) []byte {
	t.Helper()
	var sealed []byte
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT secret_sealed FROM conversation_webhook_secrets WHERE company_id = $1`,
		companyID).Scan(&sealed))
	secret, err := testdb.Sealer(w.pool).Open(w.ctx, companyID, sealing.WebhookSecret, "", sealed)
	require.NoError(t, err)
	return secret
}

// joinCode inserts a join code of the Company for domain, tied to
// browser and authorized for a Session that must exist.
func (w *world) joinCode(t *testing.T, companyID int64, code, domain, browser, clientID, sid string) {
	t.Helper()
	_, err := w.pool.Exec(w.ctx, `INSERT INTO browser_join_codes (company_id, code, domain, browser, created_at, expires_at,
			authorized_at, client_id, sid, scopes, extensions)
		VALUES ($1, $2, $3, $4, now(), now() + interval '2 minutes', now(), $5, $6, '{}', '{}')`,
		companyID, hashOf(code), domain, hashOf(browser), clientID, sid)
	require.NoError(t, err)
}

// joinCodeSubmitted reports whether a join code of the Company was used.
func (w *world) joinCodeSubmitted(t *testing.T, companyID int64, code string) bool {
	t.Helper()
	var submitted bool
	require.NoError(t, w.pool.QueryRow(w.ctx, `SELECT submitted_at IS NOT NULL FROM browser_join_codes
		WHERE company_id = $1 AND code = $2`, companyID, hashOf(code)).Scan(&submitted))
	return submitted
}
