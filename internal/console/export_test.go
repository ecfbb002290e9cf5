package console

import "time"

// TOTPCode is the code of a base32 TOTP secret at t, as an authenticator
// app shows it.
func TOTPCode(secret string, t time.Time) string {
	b, err := totpEncoding.DecodeString(secret)
	if err != nil {
		panic(err)
	}
	return totpCode(b, totpStepAt(t))
}

// TOTPStep is the length of a TOTP time step.
const TOTPStep = totpStep
