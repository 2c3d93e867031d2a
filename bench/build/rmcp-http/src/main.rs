//! One tool over MCP Streamable HTTP, with rmcp's service served by hyper.

#[path = "../../rmcp_echo.rs"]
mod rmcp_echo;

use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let echo = rmcp_echo::Echo::new();
    let service: StreamableHttpService<rmcp_echo::Echo, LocalSessionManager> =
        StreamableHttpService::new(
            move || Ok(echo.clone()),
            Default::default(),
            StreamableHttpServerConfig::default(),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
    loop {
        let (stream, _) = listener.accept().await?;
        let service = TowerToHyperService::new(service.clone());
        tokio::spawn(async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}
