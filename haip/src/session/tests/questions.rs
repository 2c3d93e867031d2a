//! Tools that ask: questions asked, checked, answered and bounded.

use super::*;

/// A tool that asks for `{n: integer 1..=3}` and returns the answer.
pub(super) fn asking_tool() -> Tool {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Pick {
        #[schemars(range(min = 1, max = 3))]
        n: u8,
    }
    impl crate::QuestionForm for Pick {}
    Tool::builder("pick")
        .handler(|_: Value, ctx: Context| async move {
            match ctx.ask::<Pick>("Pick one").await? {
                crate::Answer::Accepted(pick) => Ok(json!({"n": pick.n})),
                _ => Ok(json!({"n": null})),
            }
        })
        .build()
        .unwrap()
}

/// Reads call events into the session until an envelope of `ty` is out.
pub(super) async fn until(h: &mut Harness, ty: &str) -> Vec<Value> {
    h.run_until(|all| all.iter().any(|v| v["type"] == ty)).await
}

#[tokio::test]
async fn questions_are_asked_checked_and_answered() {
    let mut h = Harness::new(Config::default(), vec![asking_tool()]);
    h.send(json!({"type": "HAI", "payload": {"capabilities": {"tool_input": true}}}));
    h.send(call("q1", "pick", json!({})));
    let out = until(&mut h, "TOOL_UPDATE").await;
    let asked = &out.last().unwrap()["payload"];
    assert_eq!(asked["status"], "WAITING_INPUT", "{asked}");
    let request = &asked["input_request"];
    assert_eq!(request["message"], "Pick one");
    assert_eq!(
        request["schema"]["properties"]["n"],
        json!({"type": "integer", "minimum": 1, "maximum": 3})
    );
    let request_id = request["request_id"].as_str().unwrap().to_owned();
    let input = |payload: Value| json!({"id": "in-1", "type": "TOOL_INPUT", "payload": payload});

    // No action: malformed. Unknown request: not found. Out of range: invalid.
    h.send(input(json!({"call_id": "q1", "request_id": request_id})));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "INVALID_MESSAGE", "{out:?}");
    assert_eq!(out[0]["payload"]["detail"]["reason"], "invalid action");
    h.send(input(
        json!({"call_id": "q1", "request_id": "other", "action": "decline"}),
    ));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "REQUEST_NOT_FOUND", "{out:?}");
    assert_eq!(out[0]["payload"]["message"], "No open input request other");
    h.send(input(
        json!({"call_id": "q1", "request_id": request_id, "action": "accept", "content": {"n": 9}}),
    ));
    let out = h.out();
    assert_eq!(out[0]["payload"]["code"], "INVALID_PARAMS", "{out:?}");
    assert_eq!(out[0]["payload"]["related_id"], "in-1");
    assert_eq!(out[0]["payload"]["detail"]["violations"][0]["path"], "/n");

    // Still open: the right answer goes to the tool.
    h.send(input(
        json!({"call_id": "q1", "request_id": request_id, "action": "accept", "content": {"n": 2}}),
    ));
    let out = until(&mut h, "TOOL_DONE").await;
    assert_eq!(
        out[0]["payload"],
        json!({"call_id": "q1", "status": "RUNNING"})
    );
    let done = &out.last().unwrap()["payload"];
    assert_eq!(done["result"], json!({"n": 2}), "{done}");
}

#[tokio::test]
async fn a_client_without_tool_input_is_never_asked() {
    let mut h = Harness::new(Config::default(), vec![asking_tool()]);
    h.send(call("q1", "pick", json!({})));
    let out = until(&mut h, "TOOL_DONE").await;
    assert_eq!(out.len(), 1, "no question: {out:?}");
    let done = &out[0]["payload"];
    assert_eq!(done["status"], "ERROR");
    assert_eq!(done["result"]["code"], "TOOL_EXECUTION_ERROR");
    assert_eq!(
        done["result"]["error"],
        "the client cannot answer questions (it did not declare that it can)"
    );
}

#[tokio::test]
async fn open_questions_per_call_are_bounded() {
    #[derive(serde::Deserialize, schemars::JsonSchema)]
    struct Yes {
        #[allow(dead_code)]
        yes: bool,
    }
    impl crate::QuestionForm for Yes {}
    let greedy = Tool::builder("greedy")
        .handler(|_: Value, ctx: Context| async move {
            let asks = (0..20).map(|i| {
                let ctx = ctx.clone();
                async move { ctx.ask::<Yes>(format!("question {i}")).await }
            });
            let answers = futures_util::future::join_all(asks).await;
            let refused = answers.iter().filter(|a| a.is_err()).count();
            Ok(json!({"refused": refused}))
        })
        .build()
        .unwrap();
    let mut h = Harness::new(Config::default(), vec![greedy]);
    h.send(json!({"type": "HAI", "payload": {"capabilities": {"tool_input": true}}}));
    h.send(call("g1", "greedy", json!({})));
    let mut asked = Vec::new();
    while asked.len() < crate::context::MAX_OPEN_QUESTIONS {
        for v in until(&mut h, "TOOL_UPDATE").await {
            asked.push(v["payload"]["input_request"]["request_id"].clone());
        }
    }
    assert_eq!(asked.len(), crate::context::MAX_OPEN_QUESTIONS);
    // Answering every open one lets the tool finish: the other 4 were refused.
    for request_id in asked {
        h.send(json!({"type": "TOOL_INPUT", "payload": {"call_id": "g1", "request_id": request_id, "action": "decline"}}));
    }
    let out = until(&mut h, "TOOL_DONE").await;
    let done = &out.last().unwrap()["payload"];
    assert_eq!(done["result"], json!({"refused": 4}), "{done}");
}
