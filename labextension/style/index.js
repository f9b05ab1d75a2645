import 'uplot/dist/uPlot.min.css';
import './base.css';
import './cluster.css';
import './alerts.css';
import './cells.css';
