//! Testing tools with `haip::testing` (feature `testing`): the quickstart's
//! demo tools called in memory, over the real session and connection driver,
//! each test a few lines, the whole file in milliseconds.
//!
//! ```text
//! cargo test -p haip-examples --example testing
//! HAIP_UPDATE_SNAPSHOTS=1 cargo test -p haip-examples --example testing   # accept new schemas
//! ```

fn main() {
    println!("These are tests: cargo test -p haip-examples --example testing");
}

#[cfg(test)]
mod tests {
    use haip::LogLevel;
    use haip::json;
    use haip::testing::{Caller, TestServer};
    use haip_examples::demo;

    /// The demo tools, served by nothing: called in memory.
    fn server() -> TestServer {
        TestServer::new(haip::Server::builder().tools(demo::tools())).expect("the demo tools build")
    }

    #[tokio::test]
    async fn the_calculator_computes_and_refuses_bad_input() {
        let server = server();
        let out = server
            .call("calculator", json!({"operation": "add", "a": 1, "b": 2}))
            .await
            .unwrap();
        assert_eq!(out, json!({"result": 3.0, "operation": "add"}));

        // Typed, with the tool's own types.
        let calc: demo::Calculation = server
            .call_typed(
                "calculator",
                json!({"operation": "multiply", "a": 3, "b": 4}),
            )
            .await
            .unwrap();
        assert_eq!(calc.result, 12.0);

        // The tool's error, and the schema's, each with its code.
        let err = server
            .call("calculator", json!({"operation": "divide", "a": 1, "b": 0}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("TOOL_EXECUTION_ERROR"));
        assert!(err.to_string().contains("Division by zero"));
        let err = server
            .call("calculator", json!({"operation": "modulo", "a": 1, "b": 2}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("INVALID_PARAMS"));
    }

    #[tokio::test]
    async fn process_file_reports_progress_and_stops_when_cancelled() {
        let server = server();
        let mut call = server
            .start(
                "process_file",
                json!({"filename": "a.txt", "operation": "read"}),
            )
            .await
            .unwrap();
        assert_eq!(call.progress().await.unwrap(), 0.0);
        call.cancel(Some("not needed")).await.unwrap();
        let err = call.result().await.unwrap_err();
        assert!(err.is_cancelled(), "{err}");
    }

    #[tokio::test]
    async fn book_table_asks_and_books_what_it_is_told() {
        let server = server();
        let mut call = server
            .start("book_table", json!({"restaurant": "Luigi"}))
            .await
            .unwrap();
        let question = call.question().await.unwrap();
        assert_eq!(question.message, "How many people, and when?");
        // A party too large does not fit the question: asked again.
        let err = call
            .answer(&question, json!({"party_size": 40, "time": "19:00"}))
            .await
            .unwrap_err();
        assert_eq!(err.code(), Some("INVALID_PARAMS"));
        call.answer(&question, json!({"party_size": 4, "time": "19:00"}))
            .await
            .unwrap();
        let done = call.done().await.unwrap();
        done.assert_logged(LogLevel::Info, "checking availability at Luigi");
        assert_eq!(
            done.into_result().unwrap(),
            json!({"booked": true, "restaurant": "Luigi", "party_size": 4, "time": "19:00"})
        );

        // Declined: nothing booked.
        let mut call = server
            .start("book_table", json!({"restaurant": "Luigi"}))
            .await
            .unwrap();
        let question = call.question().await.unwrap();
        call.decline(&question).await.unwrap();
        assert_eq!(call.result().await.unwrap()["booked"], false);
    }

    #[tokio::test]
    async fn create_user_needs_its_scope_once_callers_are_authenticated() {
        let writer = Caller::new("alice").with_scopes(["users:write"]);
        let server = server().as_caller(writer);
        let user = json!({"username": "ada_l", "email": "ada@example.com", "age": 36});
        assert_eq!(
            server.call("create_user", user.clone()).await.unwrap()["created"],
            true
        );

        let reader = server.client_as(Caller::new("bob")).await.unwrap();
        let err = reader.call("create_user", user).await.unwrap_err();
        assert_eq!(err.code(), Some("FORBIDDEN"));
    }

    /// The schemas the demo tools advertise, compared with the committed
    /// `testing.schemas.json`: a change to a tool's signature or doc comments
    /// that changes what clients see fails here until the snapshot is accepted.
    #[tokio::test]
    async fn advertised_schemas_match_the_snapshot() {
        // Fails listing the lines that changed; `HAIP_UPDATE_SNAPSHOTS=1`
        // writes the file instead.
        server()
            .check_schemas_snapshot("testing.schemas.json")
            .await
            .unwrap();
    }
}
