//! The inspector at `/inspector`, driven in a real browser (headless
//! Chromium over WebDriver, `support/browser.rs`) against the quickstart's
//! tools: the page lists them, builds forms from their schemas, calls them
//! with live progress, cancels, shows `INVALID_PARAMS` under the field it
//! names, answers `ctx.ask` questions, shows tools' titles, hints and icons
//! and asks before calling a destructive one, and asks for a token when the
//! server needs one. Each state is saved under `target/inspector-screenshots/`.

use crate::browser;
use crate::mcp_support;
use crate::support;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use browser::{Browser, WIDE};
use haip::Limits;
use haip::{Context, Icon, Tool, ToolAnnotations, ToolError};
use serde_json::{Value, json};
use support::{base_limits, demo_builder, get_json, hs256_token, http_get, start, within};

/// Opens the inspector of the server at `addr` (with `query`, e.g.
/// `?transport=sse`) and waits until it is connected and lists the tools.
async fn open(b: &Browser, addr: SocketAddr, query: &str) {
    open_at(b, &format!("http://{addr}"), query).await;
}

/// [`open`] for a server whose routes are under `base` (`http://ADDR/agent`).
async fn open_at(b: &Browser, base: &str, query: &str) {
    b.goto(&format!("{base}/inspector{query}")).await;
    b.find("#status[data-state=\"open\"]").await;
    b.find("#tools button[data-tool=\"calculator\"]").await;
}

/// Chooses `tool` and waits for its form.
async fn choose(b: &Browser, tool: &str) {
    b.click(&format!("#tools button[data-tool=\"{tool}\"]"))
        .await;
    b.find(&format!("#params[data-tool=\"{tool}\"] .form"))
        .await;
}

/// The input (or select, or textarea) of the params field at `pointer`.
fn param(pointer: &str) -> String {
    format!("#params .field[data-path=\"{pointer}\"] > :is(input, select, textarea)")
}

/// Fills the calculator's form with `5 add 3`, calls it and waits for `8`.
async fn calculate(b: &Browser) {
    choose(b, "calculator").await;
    b.select(&param("/operation"), "add").await;
    b.fill(&param("/a"), "5").await;
    b.fill(&param("/b"), "3").await;
    b.click("#call").await;
    b.find("#result[data-status=\"OK\"]").await;
    let body = b.wait_text("#result-body", "\"result\": 8").await;
    assert!(body.contains("\"operation\": \"add\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inspector_is_not_found_unless_turned_on() {
    let (off, _) = start(demo_builder()).await;
    let response = http_get(off.local_addr(), "/inspector").await;
    assert_eq!(response.status, 404, "{response:?}");
    assert_eq!(response.json()["code"], "NOT_FOUND", "{response:?}");

    let (on, _) = start(demo_builder().inspector(true)).await;
    let page = http_get(on.local_addr(), "/inspector").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert_eq!(
        page.header("content-type"),
        Some("text/html; charset=utf-8")
    );
    let policy = page.header("content-security-policy").unwrap_or_default();
    assert!(policy.contains("default-src 'none'"), "{policy}");
    assert!(policy.contains("connect-src 'self'"), "{policy}");
    // One self-contained page: nothing is fetched from anywhere else.
    assert!(page.body.contains("<title>haip inspector</title>"));
    for outside in ["src=\"http", "href=\"http", "@import", "url(http", "<link "] {
        assert!(
            !page.body.contains(outside),
            "the page loads something from elsewhere ({outside})"
        );
    }
    // Only that path: no directory of other assets.
    let other = http_get(on.local_addr(), "/inspector/app.js").await;
    assert_eq!(other.status, 404, "{other:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calculator_is_filled_in_and_called_and_fits_a_phone() {
    let (server, _) = start(demo_builder().inspector(true)).await;
    let addr = server.local_addr();
    Browser::run("calculator", WIDE, |b| async move {
        open(&b, addr, "").await;
        let names = b
            .eval("return [...document.querySelectorAll('#tools > li')].map(l => l.dataset.tool);")
            .await;
        assert_eq!(names, json!(support::QUICKSTART_TOOLS));
        // Descriptions come with the list; the filter narrows it.
        b.wait_text(
            "#tools button[data-tool=\"calculator\"] .tool-desc",
            "Perform a basic arithmetic operation",
        )
        .await;
        b.fill("#filter", "user").await;
        b.wait_until(
            "the filter to leave create_user alone",
            "[...document.querySelectorAll('#tools > li')].filter(l => !l.hidden)\
             .map(l => l.dataset.tool).join() === 'create_user'",
        )
        .await;
        b.eval(
            "const f = document.getElementById('filter'); f.value = ''; \
             f.dispatchEvent(new Event('input')); return true;",
        )
        .await;
        b.find("#tools li[data-tool=\"calculator\"]").await;

        choose(&b, "calculator").await;
        // Required fields are marked, descriptions are help text, the
        // documented enum is a select of its values.
        for field in ["/operation", "/a", "/b"] {
            b.find(&format!(
                "#params .field[data-path=\"{field}\"][data-required=\"true\"] .req"
            ))
            .await;
        }
        b.wait_text("#params .field[data-path=\"/a\"] .help", "First operand.")
            .await;
        let options = b
            .eval(
                "return [...document.querySelectorAll('#params .field[data-path=\"/operation\"] option')]\
                 .map(o => o.value);",
            )
            .await;
        assert_eq!(
            options,
            json!(["add", "subtract", "multiply", "divide"])
        );
        calculate(&b).await;
        b.screenshot("calculator").await;

        // A phone: nothing sticks out sideways, and the form still works.
        b.resize((360, 780)).await;
        let fits = b
            .eval(
                "return [window.innerWidth, document.documentElement.scrollWidth, \
                 document.getElementById('call').getBoundingClientRect().right];",
            )
            .await;
        let [inner, scroll, call_right] = [0, 1, 2].map(|i| fits[i].as_f64().unwrap_or(f64::MAX));
        assert!(inner <= 400.0, "the window is not narrow: {fits}");
        assert!(scroll <= inner, "the page scrolls sideways at 360 px: {fits}");
        assert!(call_right <= inner, "Call is off screen at 360 px: {fits}");
        b.fill(&param("/a"), "2").await;
        b.click("#call").await;
        b.wait_text("#result-body", "\"result\": 5").await;
        b.screenshot("calculator-360px").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn process_file_shows_progress_and_can_be_cancelled() {
    let (server, _) = start(demo_builder().inspector(true)).await;
    let addr = server.local_addr();
    Browser::run("process_file", WIDE, |b| async move {
        open(&b, addr, "").await;
        choose(&b, "process_file").await;
        b.fill(&param("/filename"), "report.csv").await;
        b.fill(&param("/operation"), "analyze").await;

        // Once to the end: the bar goes up to 100 and the result shows.
        b.click("#call").await;
        b.wait_until(
            "progress above 0",
            "Number(document.getElementById('run').dataset.progress) > 0",
        )
        .await;
        b.screenshot("process_file-running").await;
        b.find("#result[data-status=\"OK\"]").await;
        b.wait_text("#result-body", "\"lines\": 150").await;
        assert_eq!(
            b.eval("return document.getElementById('progress').value;")
                .await,
            100
        );

        // Again, cancelled midway: the bar has moved, then CANCELLED.
        b.click("#call").await;
        let first = b
            .wait_until(
                "a first progress report",
                "document.getElementById('run').dataset.progress",
            )
            .await;
        let first: f64 = first.as_str().and_then(|s| s.parse().ok()).unwrap_or(0.0);
        let later = b
            .wait_until(
                "the progress bar to advance",
                &format!(
                    "Number(document.getElementById('run').dataset.progress) > {first} \
                     && document.getElementById('progress').value"
                ),
            )
            .await;
        assert!(
            later.as_f64().unwrap_or(0.0) > first,
            "{later} after {first}"
        );
        b.click("#cancel").await;
        b.find("#result[data-status=\"CANCELLED\"]").await;
        b.wait_text("#result-status", "CANCELLED").await;
        b.wait_text("#result-body", "cancelled in the inspector")
            .await;
        b.screenshot("process_file-cancelled").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_email_is_shown_under_the_email_field() {
    let (server, _) = start(demo_builder().inspector(true)).await;
    let addr = server.local_addr();
    Browser::run("create_user", WIDE, |b| async move {
        open(&b, addr, "").await;
        choose(&b, "create_user").await;
        // The schema's limits are hints beside the fields.
        b.wait_text(
            "#params .field[data-path=\"/username\"] .hint",
            "3–20 characters",
        )
        .await;
        b.wait_text("#params .field[data-path=\"/age\"] .hint", "≥ 13")
            .await;
        b.fill(&param("/username"), "ada_l").await;
        b.fill(&param("/email"), "not-an-email").await;
        b.fill(&param("/age"), "36").await;
        b.click("#call").await;
        b.find("#result[data-status=\"ERROR\"][data-code=\"INVALID_PARAMS\"]")
            .await;
        let under = b
            .wait_text(
                "#params .field[data-path=\"/email\"] > .field-error",
                "email",
            )
            .await;
        assert!(under.contains("not-an-email"), "{under}");
        let others = b
            .eval(
                "return [...document.querySelectorAll('#params .field-error')]\
                 .filter(e => !e.hidden).map(e => e.dataset.errorFor);",
            )
            .await;
        assert_eq!(others, json!(["/email"]), "only email is wrong");
        b.screenshot("create_user-invalid-email").await;

        b.fill(&param("/email"), "ada@example.com").await;
        b.click("#call").await;
        b.find("#result[data-status=\"OK\"]").await;
        b.wait_text("#result-body", "\"created\": true").await;
        let shown = b
            .eval(
                "return [...document.querySelectorAll('#params .field-error')]\
                 .filter(e => !e.hidden).length;",
            )
            .await;
        assert_eq!(shown, 0, "the error went away with the mistake");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn book_table_asks_in_the_page_and_takes_the_answer() {
    let (server, _) = start(demo_builder().inspector(true)).await;
    let addr = server.local_addr();
    Browser::run("book_table", WIDE, |b| async move {
        open(&b, addr, "").await;
        choose(&b, "book_table").await;
        b.fill(&param("/restaurant"), "Chez Haip").await;
        b.click("#call").await;
        b.wait_text("#logs", "checking availability at Chez Haip")
            .await;
        let question = "#questions .question";
        b.wait_text(question, "How many people, and when?").await;
        b.wait_text("#call-status", "WAITING_INPUT").await;
        let party = format!("{question} .field[data-path=\"/party_size\"] > input");
        let time = format!("{question} .field[data-path=\"/time\"] > select");
        b.fill(&party, "4").await;
        b.select(&time, "19:00").await;
        b.screenshot("book_table-question").await;
        // Too many people: the server refuses the answer, the question stays.
        b.fill(&party, "20").await;
        b.click(&format!("{question} button[data-action=\"accept\"]"))
            .await;
        b.wait_text(
            &format!("{question} .field[data-path=\"/party_size\"] > .field-error"),
            "20",
        )
        .await;
        b.fill(&party, "4").await;
        b.click(&format!("{question} button[data-action=\"accept\"]"))
            .await;
        b.find("#result[data-status=\"OK\"]").await;
        let body = b.wait_text("#result-body", "\"booked\": true").await;
        assert!(body.contains("\"time\": \"19:00\""), "{body}");
        assert!(body.contains("\"party_size\": 4"), "{body}");
        let open_questions = b
            .eval("return document.querySelectorAll('#questions .question').length;")
            .await;
        assert_eq!(open_questions, 0);
        b.screenshot("book_table-booked").await;

        // Declining is an answer too.
        b.click("#call").await;
        b.click(&format!("{question} button[data-action=\"decline\"]"))
            .await;
        b.find("#result[data-status=\"OK\"]").await;
        b.wait_text("#result-body", "\"booked\": false").await;
    })
    .await;
}

/// A tool whose input schema has every kind of field the page builds a
/// form for; it answers with the params it got.
fn form_kinds() -> Tool {
    Tool::builder("form_kinds")
        .description("Every kind of field")
        .input_schema(json!({
            "type": "object",
            "properties": {
                "title": {"type": "string", "default": "hello", "description": "A title."},
                "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
                "ratio": {"type": ["number", "null"]},
                "loud": {"type": "boolean", "default": false},
                "tags": {"type": "array", "items": {"type": "string"}, "default": ["a"]},
                "colour": {"type": "string", "enum": ["red", "green"], "default": "green"},
                "sizes": {"type": "array", "items": {"type": "string", "enum": ["S", "M", "L"]}},
                "owner": {
                    "type": "object",
                    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
                    "required": ["name"],
                    "additionalProperties": false
                },
                "extra": {"type": "object", "additionalProperties": {"type": "string"}}
            },
            "required": ["title", "owner"],
            "additionalProperties": false
        }))
        .handler(|params: Value, _ctx: Context| async move {
            Ok::<_, ToolError>(json!({ "got": params }))
        })
        .build()
        .expect("form_kinds is a valid tool")
}

/// An 8x8 red PNG, made for this test.
const RED_DOT: &str = "iVBORw0KGgoAAAANSUhEUgAAAAgAAAAICAIAAABLbSncAAAAEUlEQVR4nGO4YGCAFTEMLQkA2ntMAeuWKpoAAAAASUVORK5CYII=";

/// A tool answering with content blocks (docs/protocol.md §6.12): text and an image.
fn picture() -> Tool {
    Tool::builder("picture")
        .description("A red dot")
        .handler(|_params: Value, _ctx: Context| async move {
            Ok::<_, ToolError>(json!({"content": [
                {"type": "text", "text": "a red dot"},
                {"type": "image", "data": RED_DOT, "mimeType": "image/png"}
            ]}))
        })
        .build()
        .expect("picture is a valid tool")
}

/// What the last call's result says it got, as JSON.
async fn result_json(b: &Browser) -> Value {
    let text = b.text("#result-body").await;
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("the result is not JSON ({e}): {text}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forms_cover_defaults_lists_choices_and_nested_objects() {
    let (server, _) = start(
        demo_builder()
            .tool(form_kinds())
            .tool(picture())
            .inspector(true),
    )
    .await;
    let addr = server.local_addr();
    Browser::run("form_kinds", WIDE, |b| async move {
        open(&b, addr, "").await;
        choose(&b, "form_kinds").await;
        // Defaults are filled in.
        let defaults = b
            .eval(
                "const f = p => document.querySelector(`#params .field[data-path=\"${p}\"]`); \
                 return [f('/title').querySelector('input').value, f('/count').querySelector('input').value, \
                 f('/colour').querySelector('select').value, f('/loud').querySelector('input').checked, \
                 [...f('/tags').querySelectorAll('.row input')].map(i => i.value)];",
            )
            .await;
        assert_eq!(defaults, json!(["hello", "3", "green", false, ["a"]]));
        b.find("#params fieldset.field[data-path=\"/owner\"] .field[data-path=\"/owner/name\"]")
            .await;
        b.fill(&param("/owner/name"), "Ada").await;
        b.click("#params .field[data-path=\"/tags\"] button[data-action=\"add-item\"]")
            .await;
        b.fill("#params .field[data-path=\"/tags\"] .row:nth-child(2) input", "b")
            .await;
        b.click("#params .field[data-path=\"/loud\"] input[type=\"checkbox\"]")
            .await;
        b.click("#params .field[data-path=\"/sizes\"] input[data-index=\"1\"]")
            .await;
        b.click("#call").await;
        b.find("#result[data-status=\"OK\"]").await;
        assert_eq!(
            result_json(&b).await,
            json!({"got": {
                "title": "hello", "count": 3, "loud": true, "tags": ["a", "b"],
                "colour": "green", "sizes": ["M"], "owner": {"name": "Ada"}
            }}),
            "optional fields left empty are not sent"
        );

        // The server's complaints land under the fields, nested ones too.
        b.fill(&param("/count"), "11").await;
        b.fill(&param("/owner/age"), "1.5").await;
        b.click("#call").await;
        b.find("#result[data-code=\"INVALID_PARAMS\"]").await;
        b.wait_text("#params .field[data-path=\"/count\"] > .field-error", "11")
            .await;
        b.wait_text(
            "#params .field[data-path=\"/owner/age\"] > .field-error",
            "1.5",
        )
        .await;
        b.screenshot("form_kinds-invalid").await;

        // Or as JSON, by hand.
        b.click("#raw-toggle").await;
        b.fill("#params-json", r#"{"title": "raw", "owner": {"name": "Bo"}}"#)
            .await;
        b.click("#call").await;
        b.find("#result[data-status=\"OK\"]").await;
        assert_eq!(
            result_json(&b).await,
            json!({"got": {"title": "raw", "owner": {"name": "Bo"}}})
        );

        // Content blocks: the text, and the image as an image.
        choose(&b, "picture").await;
        b.click("#call").await;
        b.wait_text("#result-content", "a red dot").await;
        let width = b
            .wait_until(
                "the image to load",
                "document.querySelector('#result-content img')?.naturalWidth",
            )
            .await;
        assert_eq!(width, 8);
    })
    .await;
}

/// `wipe`, which declares itself destructive and idempotent, with a title
/// and an icon, and counts its calls; and `peek`, read-only and open-world.
fn annotated(calls: Arc<AtomicUsize>) -> [Tool; 2] {
    let wipe = Tool::builder("wipe")
        .title("Wipe everything")
        .description("Deletes every file")
        .annotations(ToolAnnotations::new().destructive(true).idempotent(true))
        .icon(Icon::new(format!("data:image/png;base64,{RED_DOT}")).with_mime_type("image/png"))
        .handler(move |_params: Value, _ctx: Context| {
            let calls = Arc::clone(&calls);
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                Ok::<_, ToolError>(json!({"wiped": true}))
            }
        })
        .build()
        .expect("wipe is a valid tool");
    let peek = Tool::builder("peek")
        .annotations(ToolAnnotations::new().read_only(true).open_world(true))
        .handler(|_params: Value, _ctx: Context| async move { Ok::<_, ToolError>(json!("seen")) })
        .build()
        .expect("peek is a valid tool");
    [wipe, peek]
}

/// The hints shown as badges under `scope`.
async fn badges(b: &Browser, scope: &str) -> Value {
    b.eval(&format!(
        "return [...document.querySelectorAll('{scope} .badge')].map(x => x.dataset.hint);"
    ))
    .await
}

/// How many `TOOL_CALL`s the page has sent.
async fn calls_sent(b: &Browser) -> Value {
    b.eval(
        "return document.querySelectorAll('#wire-log li[data-dir=\"out\"][data-type=\"TOOL_CALL\"]').length;",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn titles_hints_and_icons_show_and_a_destructive_tool_asks_first() {
    let calls = Arc::new(AtomicUsize::new(0));
    let (server, _) = start(
        demo_builder()
            .tools(annotated(Arc::clone(&calls)))
            .inspector(true),
    )
    .await;
    let addr = server.local_addr();
    Browser::run("annotations", WIDE, |b| async move {
        open(&b, addr, "").await;
        // The list: the title with the name beside it, the hints, the icon.
        let wipe = "#tools button[data-tool=\"wipe\"]";
        b.wait_text(&format!("{wipe} .tool-title"), "Wipe everything")
            .await;
        assert_eq!(b.text(&format!("{wipe} .tool-name")).await, "wipe");
        assert_eq!(badges(&b, wipe).await, json!(["destructive", "idempotent"]));
        b.find(&format!("{wipe} img.tool-icon")).await;
        // A tool that declares nothing shows nothing of the kind.
        let bare = b
            .eval(
                "return document.querySelectorAll('#tools button[data-tool=\"echo\"] \
                 :is(.badge, .tool-title, img)').length;",
            )
            .await;
        assert_eq!(bare, 0);

        choose(&b, "wipe").await;
        b.wait_text("#tool-title", "Wipe everything").await;
        assert_eq!(b.text("#tool-name").await, "wipe");
        assert_eq!(
            badges(&b, "#tool-badges").await,
            json!(["destructive", "idempotent"])
        );
        let width = b
            .wait_until(
                "the icon to load",
                "document.getElementById('tool-icon').naturalWidth",
            )
            .await;
        assert_eq!(width, 8);

        // Asked first; "Don't call" sends nothing.
        b.click("#call").await;
        b.wait_text(
            "#confirm-message",
            "This tool is destructive: Wipe everything. Call it?",
        )
        .await;
        b.screenshot("annotations-confirm").await;
        b.click("#confirm-cancel").await;
        b.wait_until(
            "the confirmation to go",
            "document.getElementById('confirm').hidden",
        )
        .await;
        assert_eq!(calls_sent(&b).await, 0);
        assert_eq!(
            b.eval("return document.getElementById('run').hidden;")
                .await,
            true,
            "no call shown"
        );

        // A read-only tool is called at once. The server handles a session's
        // envelopes in order: once this call is done, a call sent before it
        // would have been counted.
        choose(&b, "peek").await;
        assert_eq!(
            badges(&b, "#tool-badges").await,
            json!(["read-only", "open-world"])
        );
        assert_eq!(
            b.eval("return document.getElementById('tool-title').hidden;")
                .await,
            true,
            "no title: the name is the heading"
        );
        b.click("#call").await;
        b.find("#result[data-status=\"OK\"]").await;
        b.wait_text("#result-body", "seen").await;
        assert_eq!(calls_sent(&b).await, 1);
        assert_eq!(
            calls.load(Ordering::SeqCst),
            0,
            "the dismissed call never ran"
        );
        let stats = get_json(addr, "/stats").await;
        assert_eq!(stats["toolExecutions"]["total"], 1, "{stats}");

        // "Call it" calls it, once.
        choose(&b, "wipe").await;
        b.click("#call").await;
        b.find("#confirm:not([hidden])").await;
        b.click("#confirm-call").await;
        b.find("#result[data-status=\"OK\"]").await;
        b.wait_text("#result-body", "\"wiped\": true").await;
        assert_eq!(
            b.eval("return document.getElementById('confirm').hidden;")
                .await,
            true
        );
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        b.screenshot("annotations-called").await;
    })
    .await;
}

const SECRET: &str = "inspector-test-secret-of-32-bytes-or-more";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_auth_on_the_page_asks_for_a_token_and_uses_it() {
    let (server, _) = start(demo_builder().jwt_hs256(SECRET).inspector(true)).await;
    let addr = server.local_addr();
    // The page is public; what it connects to is not.
    assert_eq!(http_get(addr, "/inspector").await.status, 200);
    Browser::run("auth", WIDE, |b| async move {
        for query in ["", "?transport=sse"] {
            b.goto(&format!("http://{addr}/inspector{query}")).await;
            b.eval("sessionStorage.clear(); return true;").await;
            b.goto(&format!("http://{addr}/inspector{query}")).await;
            b.find("#status[data-state=\"auth\"]").await;
            b.wait_text("#auth-message", "This server needs a token.")
                .await;
            if query.is_empty() {
                b.screenshot("auth-needs-token").await;
            }
            b.fill("#token", "not.a.token").await;
            b.click("#token-connect").await;
            b.wait_text("#auth-message", "refused this one").await;

            let token = hs256_token(SECRET, "inspector-user", None);
            b.fill("#token", &token).await;
            b.click("#token-connect").await;
            b.find("#status[data-state=\"open\"]").await;
            assert_eq!(
                b.eval("return document.getElementById('auth').hidden;")
                    .await,
                true,
                "the token notice goes once connected"
            );
            b.find("#tools button[data-tool=\"calculator\"]").await;
            calculate(&b).await;
            let transport = b.text("#transport").await;
            let expected = if query.is_empty() { "WebSocket" } else { "SSE" };
            assert!(transport.starts_with(expected), "{query}: {transport}");
            // The token never lands in the address bar.
            let url = b.eval("return location.href;").await;
            assert!(!url.to_string().contains(&token), "{url}");
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_websocket_the_page_falls_back_to_sse() {
    // Behind a proxy that does not pass WebSocket upgrades (a 502 for
    // them), the page falls back to SSE through the same proxy.
    let (server, _) = start(demo_builder().inspector(true)).await;
    let proxy = NoUpgradeProxy::start(server.local_addr()).await;
    let addr = proxy.addr;
    Browser::run("sse_fallback", WIDE, |b| async move {
        open(&b, addr, "").await;
        b.wait_text("#transport", "SSE (WebSocket failed").await;
        calculate(&b).await;
        choose(&b, "process_file").await;
        b.fill(&param("/filename"), "a.txt").await;
        b.fill(&param("/operation"), "count").await;
        b.click("#call").await;
        b.find("#result[data-status=\"OK\"]").await;
        b.wait_text("#result-body", "\"processed\": true").await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_enforcing_credit_answers_every_call_the_page_makes() {
    // Strict flow control with two messages of credit per channel: the
    // page's HAI declares flow_control, so the server returns credit with
    // FLOW_UPDATEs (and holds its own envelopes to the page's grants); three
    // calls in a row all get their TOOL_DONE and nothing is refused. (This
    // server restores credit as it returns it, so a client cannot outrun it
    // here without also being stuck: the page's own credit check is for
    // servers that count differently.)
    let (server, _) = start(
        demo_builder()
            .strict_flow_control(true)
            .limits(Limits {
                initial_credit_messages: 2,
                credit_return_messages: 2,
                ..base_limits()
            })
            .inspector(true),
    )
    .await;
    let addr = server.local_addr();
    Browser::run("strict_flow_control", WIDE, |b| async move {
        open(&b, addr, "").await;
        choose(&b, "calculator").await;
        b.select(&param("/operation"), "add").await;
        b.fill(&param("/a"), "5").await;
        b.fill(&param("/b"), "3").await;
        b.eval("for (let i = 0; i < 3; i++) document.getElementById('call').click(); return true;")
            .await;
        b.wait_until(
            "three TOOL_DONEs",
            "document.querySelectorAll('#wire-log li[data-dir=\"in\"][data-type=\"TOOL_DONE\"]')\
             .length === 3",
        )
        .await;
        b.find("#result[data-status=\"OK\"]").await;
        b.wait_text("#result-body", "\"result\": 8").await;
        let refused = b
            .eval(
                "return [...document.querySelectorAll('#wire-log li[data-dir=\"in\"][data-type=\"ERROR\"]')]\
                 .map(l => l.innerText);",
            )
            .await;
        assert_eq!(refused, json!([]), "the server refused something");
    })
    .await;
}

/// Kills the quickstart when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quickstart_prints_where_its_inspector_is() {
    let binary = mcp_support::example_binary("quickstart");
    let mut child = Command::new(binary)
        .env("HAIP_ADDR", "127.0.0.1:0")
        .env("NO_COLOR", "1")
        .env_remove("HAIP_JWT_SECRET")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the quickstart starts");
    let stderr = child.stderr.take().expect("stderr is piped");
    let _running = Running(child);
    let (url_tx, url_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let mut url_tx = Some(url_tx);
        // Keep reading (and discarding) so the quickstart never blocks on stderr.
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let Some(at) = line.find("http://") else {
                continue;
            };
            let url: String = line[at..]
                .chars()
                .take_while(|c| !c.is_whitespace())
                .collect();
            if url.ends_with("/inspector")
                && let Some(tx) = url_tx.take()
            {
                let _ = tx.send(url);
            }
        }
    });
    let url = within("the quickstart to print its inspector's URL", url_rx)
        .await
        .expect("the quickstart prints the inspector's URL");
    let addr: SocketAddr = url
        .trim_start_matches("http://")
        .trim_end_matches("/inspector")
        .parse()
        .unwrap_or_else(|e| panic!("{url} does not name an address: {e}"));
    assert_ne!(addr.port(), 0, "the bound port, not the one asked for");
    let page = http_get(addr, "/inspector").await;
    assert_eq!(page.status, 200, "{page:?}");
    assert!(page.body.contains("haip inspector"));
}

/// Nested at `/agent` in an axum application (`Server::into_service`,
/// `examples/axum_app.rs`), the page at `/agent/inspector` connects to
/// `/agent/haip` over WebSocket (the server counts the connection), lists
/// the tools and calls one; with `?transport=sse` it does the same over
/// `/agent/haip/sse` and `/agent/haip/message`. Nothing of haip's is at the
/// root, so a page using root URLs would not connect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_under_a_prefix_the_page_finds_its_routes_beside_it() {
    let app =
        crate::embedded_support::start_embedded(demo_builder().inspector(true), "/agent").await;
    let base = app.url("");
    let addr = app.addr;
    for path in ["/inspector", "/haip", "/haip/sse"] {
        let response = http_get(addr, path).await;
        assert_eq!(response.status, 404, "GET {path}: {response:?}");
    }
    Browser::run("nested_inspector", WIDE, |b| async move {
        open_at(&b, &base, "").await;
        assert_eq!(b.text("#transport").await, "WebSocket");
        calculate(&b).await;
        let stats = get_json(addr, "/agent/stats").await;
        assert_eq!(
            stats["activeConnections"], 1,
            "the page's WebSocket: {stats}"
        );
        b.screenshot("nested-inspector").await;

        open_at(&b, &base, "?transport=sse").await;
        let transport = b.text("#transport").await;
        assert!(transport.starts_with("SSE"), "{transport}");
        calculate(&b).await;
    })
    .await;
    app.stop().await;
}

/// Nested, behind a proxy that refuses WebSocket upgrades: the page falls
/// back to `/agent/haip/sse` and `/agent/haip/message`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nested_under_a_prefix_the_page_falls_back_to_sse_beside_it() {
    let app =
        crate::embedded_support::start_embedded(demo_builder().inspector(true), "/agent").await;
    let proxy = NoUpgradeProxy::start(app.addr).await;
    let base = format!("http://{}/agent", proxy.addr);
    Browser::run("nested_sse_fallback", WIDE, |b| async move {
        open_at(&b, &base, "").await;
        b.wait_text("#transport", "SSE (WebSocket failed").await;
        calculate(&b).await;
    })
    .await;
    drop(proxy);
    app.stop().await;
}

/// A loopback proxy in front of `backend` that answers `502` to WebSocket
/// upgrades and passes every other connection through byte for byte.
struct NoUpgradeProxy {
    addr: SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl NoUpgradeProxy {
    async fn start(backend: SocketAddr) -> NoUpgradeProxy {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    // The request head decides: an upgrade is refused, the
                    // rest is spliced (browsers open a socket of its own for
                    // a WebSocket, never a kept-alive one).
                    let mut head = Vec::new();
                    let mut buf = [0u8; 4096];
                    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < 65_536 {
                        match client.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => head.extend_from_slice(&buf[..n]),
                        }
                    }
                    let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
                    if text.contains("\r\nupgrade: websocket") {
                        let refusal = "HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\nconnection: close\r\n\r\n";
                        let _ = client.write_all(refusal.as_bytes()).await;
                        return;
                    }
                    let Ok(mut upstream) = tokio::net::TcpStream::connect(backend).await else {
                        return;
                    };
                    if upstream.write_all(&head).await.is_ok() {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
                    }
                });
            }
        });
        NoUpgradeProxy { addr, task }
    }
}

impl Drop for NoUpgradeProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
