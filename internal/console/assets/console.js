// The console's one script: passkeys (WebAuthn). Buttons with
// data-passkey="register|signin|second" are shown only where WebAuthn is
// available; a click asks the server for options (data-begin), the
// browser for a credential, and sends it back (data-finish), with the
// page's CSRF token. Everything else works without this script.
"use strict";
(function () {
  if (!window.PublicKeyCredential || !PublicKeyCredential.parseCreationOptionsFromJSON) {
    return;
  }
  function token() {
    var meta = document.querySelector('meta[name="csrf-token"]');
    return meta ? meta.content : "";
  }
  async function post(url, body) {
    var resp = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": token() },
      body: body === undefined ? "{}" : JSON.stringify(body),
    });
    var data = await resp.json().catch(function () { return {}; });
    if (!resp.ok) {
      throw new Error(data.error || "That did not work. Reload the page and try again.");
    }
    return data;
  }
  async function run(button) {
    var status = document.getElementById(button.dataset.status);
    if (status) { status.textContent = ""; }
    button.disabled = true;
    try {
      var options = await post(button.dataset.begin);
      var credential;
      if (button.dataset.passkey === "register") {
        credential = await navigator.credentials.create({
          publicKey: PublicKeyCredential.parseCreationOptionsFromJSON(options.publicKey),
        });
      } else {
        credential = await navigator.credentials.get({
          publicKey: PublicKeyCredential.parseRequestOptionsFromJSON(options.publicKey),
        });
      }
      var done = await post(button.dataset.finish, credential.toJSON());
      window.location.assign(done.next);
    } catch (e) {
      if (status) { status.textContent = e.message; }
      button.disabled = false;
    }
  }
  document.querySelectorAll("button[data-passkey]").forEach(function (button) {
    button.hidden = false;
    button.addEventListener("click", function () { run(button); });
  });
})();
